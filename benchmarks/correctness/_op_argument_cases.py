"""The cases of the op-argument campaign (`op_arguments.py`), by XNNPACK partitioner config.

Each case is a tiny module, its inputs, the op whose delegation is checked (the config's
``target_name``, or the sibling op a setting turns it into) and the arguments it sets.
Inputs are chosen so that the argument changes the result: GELU near |x| = 2.7 where tanh
and exact GELU differ most, negative values under a max pool whose window reaches the
padded border, halves under ceil/floor, a 5 -> 7 resize where ``align_corners`` moves
every sample.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn
from torch.export import Dim
from torch.nn.utils.parametrizations import weight_norm

__all__ = ["Case", "CASES", "Fn"]

FP32, FP16, INT8, INT8_DYNAMIC, INT4_AFFINE = "fp32", "fp16", "int8", "int8-dyn", "int4-affine"


@dataclass(frozen=True)
class Case:
    config: str  # the stock config class the case exercises
    target: str  # the edge op whose delegation is checked (format_target_name form)
    arguments: str
    make: Callable[[], nn.Module]
    inputs: Callable[[], tuple[torch.Tensor, ...]]
    precision: str = FP32
    dynamic: Optional[Any] = field(default=None)


def _rand(*shape: int, seed: int = 0, low: float = -3.0, high: float = 3.0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.rand(shape, generator=generator) * (high - low) + low


def _img(channels: int = 4, size: int = 7, *, seed: int = 0, **kw: float) -> torch.Tensor:
    return _rand(1, channels, size, size, seed=seed, **kw)


class Fn(nn.Module):
    """A module computing ``fn(*inputs)``; ``fn`` may read the module's parameters."""

    def __init__(self, fn: Callable[..., Any], **params: torch.Tensor) -> None:
        super().__init__()
        self.fn = fn
        for name, value in params.items():
            setattr(self, name, nn.Parameter(value))

    def forward(self, *inputs: torch.Tensor) -> Any:
        return self.fn(self, *inputs)


def fn(f: Callable[..., Any], **params: torch.Tensor) -> Callable[[], nn.Module]:
    return lambda: Fn(f, **params)


def seq(*layers: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
    def make() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(*(layer() for layer in layers))

    return make


def mod(factory: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
    def make() -> nn.Module:
        torch.manual_seed(0)
        module = factory()
        # Non-trivial batch-norm statistics and affine terms.
        for sub in module.modules():
            if isinstance(sub, nn.modules.batchnorm._BatchNorm):
                sub.running_mean.uniform_(-1, 1)
                sub.running_var.uniform_(0.5, 2)
                nn.init.uniform_(sub.weight, 0.5, 1.5)
                nn.init.uniform_(sub.bias, -0.5, 0.5)
        return module

    return make


def one(x: torch.Tensor) -> Callable[[], tuple[torch.Tensor, ...]]:
    return lambda: (x,)


def two(x: torch.Tensor, y: torch.Tensor) -> Callable[[], tuple[torch.Tensor, ...]]:
    return lambda: (x, y)


GELU_X = torch.cat([torch.linspace(-4, 4, 81), torch.tensor([-2.7, 2.7, -2.6, -2.8])]).reshape(
    5, 17
)
HALVES = (torch.arange(-16, 16) + 0.5).reshape(4, 8) / 2 * 3  # x.5, x.25, x.75, negatives
POSITIVE = _rand(2, 3, 5, 7, low=0.1, high=4.0)
NEG_IMG = _img(low=-3.0, high=-0.5)  # all negative: a max pool that pads with 0 is wrong
W = _rand(8, 6, seed=3, low=-1, high=1)
BATCH = Dim("batch", min=1, max=8)


def _unary(
    config: str, target: str, op: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor
) -> Case:
    return Case(config, target, "-", fn(lambda m, x: op(x)), one(x))


def _fp32_and_fp16(case: Case) -> list[Case]:
    return [case, Case(case.config, case.target, case.arguments, case.make, case.inputs, FP16)]


_CASES: list[Case] = []
add = _CASES.append

# --- elementwise without arguments: inputs over the op's whole useful range -------------
for config, target, op, x in [
    ("AbsConfig", "abs.default", torch.abs, _rand(4, 8)),
    ("CeilConfig", "ceil.default", torch.ceil, HALVES),
    ("FloorConfig", "floor.default", torch.floor, HALVES),
    ("ExpConfig", "exp.default", torch.exp, _rand(4, 8, low=-8, high=8)),
    ("LogConfig", "log.default", torch.log, _rand(4, 8, low=1e-3, high=50)),
    ("NegConfig", "neg.default", torch.neg, _rand(4, 8)),
    ("ReLUConfig", "relu.default", torch.relu, _rand(4, 8)),
    ("SigmoidConfig", "sigmoid.default", torch.sigmoid, _rand(4, 8, low=-10, high=10)),
    ("TanhConfig", "tanh.default", torch.tanh, _rand(4, 8, low=-5, high=5)),
    ("SinConfig", "sin.default", torch.sin, _rand(4, 8, low=-10, high=10)),
    ("CosConfig", "cos.default", torch.cos, _rand(4, 8, low=-10, high=10)),
    ("SquareRootConfig", "sqrt.default", torch.sqrt, _rand(4, 8, low=0, high=50)),
    ("ReciprocalSquareRootConfig", "rsqrt.default", torch.rsqrt, _rand(4, 8, low=0.01, high=50)),
    ("HardswishConfig", "hardswish.default", F.hardswish, _rand(4, 8, low=-5, high=5)),
]:
    for case in _fp32_and_fp16(_unary(config, target, op, x)):
        add(case)

# --- GELU ---------------------------------------------------------------------------------
for approximate in ("none", "tanh"):
    for case in _fp32_and_fp16(
        Case(
            "GeluConfig",
            "gelu.default",
            f"approximate={approximate!r}, x in [-4, 4] and +-2.7",
            fn(lambda m, x, a=approximate: F.gelu(x, approximate=a)),
            one(GELU_X),
        )
    ):
        add(case)
add(
    Case(
        "GeluConfig",
        "gelu.default",
        "approximate='tanh' after linear (pre-activations x3)",
        fn(lambda m, x: F.gelu(F.linear(x, m.w) * 3, approximate="tanh"), w=W),
        one(_rand(4, 6, seed=4, low=-1, high=1)),
    )
)

# --- activations with slopes, alphas, bounds ----------------------------------------------
for slope in (0.01, 0.2, -0.5, 2.0):
    add(
        Case(
            "LeakyReLUConfig",
            "leaky_relu.default",
            f"negative_slope={slope}",
            fn(lambda m, x, s=slope: F.leaky_relu(x, s)),
            one(_rand(4, 8)),
        )
    )
add(
    _fp32_and_fp16(
        Case(
            "LeakyReLUConfig",
            "leaky_relu.default",
            "negative_slope=0.1",
            fn(lambda m, x: F.leaky_relu(x, 0.1)),
            one(_rand(4, 8)),
        )
    )[1]
)
for low, high in ((-1.0, 1.0), (-0.5, 2.0), (0.0, 6.0), (1.0, 1.5)):
    add(
        Case(
            "HardtanhConfig",
            "hardtanh.default",
            f"min_val={low}, max_val={high}",
            fn(lambda m, x, lo=low, hi=high: F.hardtanh(x, lo, hi)),
            one(_rand(4, 8)),
        )
    )
add(
    Case(
        "HardtanhConfig",
        "hardtanh.default",
        "relu6",
        fn(lambda m, x: F.relu6(x)),
        one(_rand(4, 8, low=-8, high=8)),
    )
)
for kwargs in ({"min": -0.5}, {"max": 0.7}, {"min": -1.25, "max": 0.5}, {"min": 0.5, "max": 0.5}):
    for case in _fp32_and_fp16(
        Case(
            "ClampConfig",
            "clamp.default",
            ", ".join(f"{k}={v}" for k, v in kwargs.items()),
            fn(lambda m, x, kw=kwargs: torch.clamp(x, **kw)),
            one(_rand(4, 8)),
        )
    ):
        add(case)
        if kwargs != {"min": -0.5}:
            break
for parameters in (1, 4):
    add(
        Case(
            "PreluConfig",
            "prelu.default",
            f"num_parameters={parameters}",
            mod(lambda p=parameters: nn.Sequential(nn.PReLU(p, init=0.1))),
            one(_img()),
        )
    )
add(
    Case(
        "PreluConfig",
        "prelu.default",
        "num_parameters=4, weight [-1, 2]",
        fn(lambda m, x: F.prelu(x, m.w), w=torch.tensor([-1.0, 0.5, 2.0, 0.0])),
        one(_img()),
    )
)
for power in (2, 3, 0.5):
    add(
        Case(
            "PowConfig",
            "pow.Tensor_Scalar",
            f"exponent={power}",
            fn(lambda m, x, p=power: torch.pow(x, p)),
            one(_rand(4, 8, low=0.1, high=3)),
        )
    )

# --- binary ---------------------------------------------------------------------------------
X48, Y48, Y8 = _rand(4, 8, seed=1), _rand(4, 8, seed=2), _rand(8, seed=5)
for config, target, op in [
    ("AddConfig", "add.Tensor", torch.add),
    ("SubConfig", "sub.Tensor", torch.sub),
    ("MulConfig", "mul.Tensor", torch.mul),
    ("DivConfig", "div.Tensor", torch.div),
    ("MaximumConfig", "maximum.default", torch.maximum),
    ("MinimumConfig", "minimum.default", torch.minimum),
]:
    for case in _fp32_and_fp16(
        Case(config, target, "same shape", fn(lambda m, x, y, o=op: o(x, y)), two(X48, Y48))
    ):
        add(case)
    add(
        Case(
            config,
            target,
            "broadcast (4, 8) with (8,)",
            fn(lambda m, x, y, o=op: o(x, y)),
            two(X48, Y8),
        )
    )
    add(
        Case(
            config,
            target,
            "broadcast (4, 1, 8) with (3, 1)",
            fn(lambda m, x, y, o=op: o(x, y)),
            two(_rand(4, 1, 8), _rand(3, 1, seed=6)),
        )
    )
for config, target, op in [
    ("AddConfig", "add.Tensor", torch.add),
    ("SubConfig", "sub.Tensor", torch.sub),
]:
    add(
        Case(
            config, target, "alpha=2.5", fn(lambda m, x, y, o=op: o(x, y, alpha=2.5)), two(X48, Y48)
        )
    )
    add(Case(config, target, "scalar other=1.5", fn(lambda m, x, o=op: o(x, 1.5)), one(X48)))
add(
    Case(
        "AddConfig",
        "add.Tensor",
        "add then relu (fused)",
        fn(lambda m, x, y: torch.relu(x + y)),
        two(X48, Y48),
    )
)
add(Case("MulConfig", "mul.Tensor", "scalar other=-0.75", fn(lambda m, x: x * -0.75), one(X48)))
add(Case("DivConfig", "div.Tensor", "scalar other=2.5", fn(lambda m, x: x / 2.5), one(X48)))
for mode in ("floor", "trunc"):
    add(
        Case(
            "DivConfig",
            "div.Tensor_mode",
            f"rounding_mode={mode!r}",
            fn(lambda m, x, y, r=mode: torch.div(x, y, rounding_mode=r)),
            two(X48, Y48),
        )
    )

# --- softmax, reductions ------------------------------------------------------------------
for dim in (-1, 2, 1, 0):
    for case in _fp32_and_fp16(
        Case(
            "SoftmaxConfig",
            "_softmax.default",
            f"dim={dim} of rank 3",
            fn(lambda m, x, d=dim: torch.softmax(x, d)),
            one(_rand(2, 3, 5, low=-6, high=6)),
        )
    ):
        add(case)
        if dim != -1:
            break
add(
    Case(
        "SoftmaxConfig",
        "_log_softmax.default",
        "log_softmax dim=-1",
        fn(lambda m, x: torch.log_softmax(x, -1)),
        one(_rand(2, 3, 5)),
    )
)
for dims, keepdim in (
    ((-1, -2), True),
    ((2, 3), True),
    ((3, 2), True),
    ((2, 3), False),
    ((1,), True),
    ((3,), True),
    ((1, 2, 3), True),
):
    for case in _fp32_and_fp16(
        Case(
            "MeanDimConfig",
            "mean.dim",
            f"dim={list(dims)}, keepdim={keepdim}",
            fn(lambda m, x, d=dims, k=keepdim: torch.mean(x, d, keepdim=k)),
            one(POSITIVE),
        )
    ):
        add(case)
        if dims != (-1, -2):
            break
add(
    Case(
        "MeanDimConfig",
        "mean.dim",
        "adaptive_avg_pool2d(1)",
        fn(lambda m, x: F.adaptive_avg_pool2d(x, 1)),
        one(POSITIVE),
    )
)
add(
    Case(
        "MeanDimConfig",
        "mean.dim",
        "rank 3, dim=[-1], keepdim=True",
        fn(lambda m, x: torch.mean(x, -1, keepdim=True)),
        one(_rand(2, 3, 5)),
    )
)
for dim, keepdim in ((3, True), (2, True), (-1, False), (-1, True), (1, True), (2, False)):
    add(
        Case(
            "MaxDimConfig",
            "max.dim",
            f"dim={dim}, keepdim={keepdim}, values",
            fn(lambda m, x, d=dim, k=keepdim: torch.max(x, d, keepdim=k)[0]),
            one(_img(seed=7)),
        )
    )
add(
    Case(
        "MaxDimConfig",
        "max.dim",
        "dim=-1, values and indices",
        fn(lambda m, x: tuple(torch.max(x, -1))),
        one(_img(seed=7)),
    )
)
add(
    Case(
        "MaxDimConfig",
        "max.dim",
        "dim=3, keepdim=True, with ties",
        fn(lambda m, x: torch.max(x, 3, keepdim=True)[0]),
        one(torch.round(_img(seed=7))),
    )
)
add(
    Case(
        "MaxDimConfig",
        "max.dim",
        "dim=-1, with ties",
        fn(lambda m, x: torch.max(x, -1)[0]),
        one(torch.round(_img(seed=7))),
    )
)
add(
    Case(
        "MaxDimConfig",
        "max.dim",
        "rank 3, dim=-1",
        fn(lambda m, x: torch.max(x, -1)[0]),
        one(_rand(2, 3, 5)),
    )
)


# --- pooling -------------------------------------------------------------------------------
def _avg(
    kernel: Any,
    stride: Any = None,
    padding: Any = 0,
    ceil: bool = False,
    include: bool = True,
    divisor: Optional[int] = None,
) -> Callable[[], nn.Module]:
    return fn(lambda m, x: F.avg_pool2d(x, kernel, stride, padding, ceil, include, divisor))


for text, make, x in [
    ("kernel=2, stride=2", _avg(2, 2), POSITIVE),
    ("kernel=3, stride=1", _avg(3, 1), POSITIVE),
    ("kernel=(2,3), stride=(1,2)", _avg((2, 3), (1, 2)), POSITIVE),
    ("kernel=3, stride=2, padding=1, count_include_pad=True", _avg(3, 2, 1), POSITIVE),
    (
        "kernel=3, stride=2, padding=1, count_include_pad=False",
        _avg(3, 2, 1, include=False),
        POSITIVE,
    ),
    (
        "kernel=3, stride=1, padding=(1,0), count_include_pad=False",
        _avg(3, 1, (1, 0), include=False),
        POSITIVE,
    ),
    ("kernel=2, stride=2, ceil_mode=True (odd input)", _avg(2, 2, ceil=True), POSITIVE),
    (
        "kernel=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False",
        _avg(3, 2, 1, ceil=True, include=False),
        POSITIVE,
    ),
    ("kernel=2, divisor_override=4 (= window)", _avg(2, 2, divisor=4), POSITIVE),
    ("kernel=2, divisor_override=3", _avg(2, 2, divisor=3), POSITIVE),
    (
        "kernel=3, stride=2, padding=1, count_include_pad=False, divisor_override=9",
        _avg(3, 2, 1, include=False, divisor=9),
        POSITIVE,
    ),
]:
    add(Case("AvgPoolingConfig", "avg_pool2d.default", text, make, one(x)))
add(
    Case(
        "AvgPoolingConfig",
        "avg_pool2d.default",
        "kernel=2, stride=2",
        _avg(2, 2),
        one(POSITIVE),
        FP16,
    )
)


def _max(
    kernel: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1, ceil: bool = False
) -> Callable[[], nn.Module]:
    return fn(lambda m, x: F.max_pool2d(x, kernel, stride, padding, dilation, ceil))


for text, make in [
    ("kernel=2, stride=2", _max(2, 2)),
    ("kernel=3, stride=1, padding=1 (negative input)", _max(3, 1, 1)),
    ("kernel=3, stride=2, padding=1 (negative input)", _max(3, 2, 1)),
    ("kernel=(3,2), stride=(2,1), padding=(1,0)", _max((3, 2), (2, 1), (1, 0))),
    ("kernel=2, stride=2, ceil_mode=True (odd input)", _max(2, 2, ceil=True)),
    ("kernel=3, stride=2, padding=1, ceil_mode=True", _max(3, 2, 1, ceil=True)),
    ("kernel=2, stride=1, dilation=2", _max(2, 1, 0, 2)),
    ("kernel=3, stride=2, padding=1, dilation=2", _max(3, 2, 1, 2)),
    ("kernel=3, stride=2, padding=1, dilation=2, ceil_mode=True", _max(3, 2, 1, 2, True)),
    ("kernel=2, stride=2, padding=1, ceil_mode=True", _max(2, 2, 1, 1, True)),
    ("kernel=2, stride=3 (stride > kernel)", _max(2, 3)),
]:
    add(Case("MaxPool2dConfig", "max_pool2d.default", text, make, one(NEG_IMG)))
add(
    Case(
        "MaxPool2dConfig",
        "max_pool2d.default",
        "kernel=3, stride=1, padding=1 (negative input)",
        _max(3, 1, 1),
        one(NEG_IMG),
        FP16,
    )
)
add(
    Case(
        "MaxPool2dConfig",
        "max_pool2d.default",
        "kernel=2, stride=2, ceil_mode=True, dynamic batch",
        _max(2, 2, ceil=True),
        one(torch.cat([NEG_IMG, NEG_IMG])),
        dynamic=({0: BATCH},),
    )
)
add(
    Case(
        "MaxPool2dConfig",
        "max_pool2d_with_indices.default",
        "kernel=2, return_indices=True",
        fn(lambda m, x: F.max_pool2d(x, 2, return_indices=True)),
        one(NEG_IMG),
    )
)

# --- interpolation -------------------------------------------------------------------------
SMALL = _rand(1, 2, 5, 5, seed=8)
for text, kwargs in [
    (
        "bilinear, scale_factor=2, align_corners=False",
        {"scale_factor": 2, "mode": "bilinear", "align_corners": False},
    ),
    (
        "bilinear, scale_factor=2, align_corners=True",
        {"scale_factor": 2, "mode": "bilinear", "align_corners": True},
    ),
    (
        "bilinear, size=7, align_corners=False",
        {"size": 7, "mode": "bilinear", "align_corners": False},
    ),
    (
        "bilinear, size=7, align_corners=True",
        {"size": 7, "mode": "bilinear", "align_corners": True},
    ),
    (
        "bilinear, size=(3,8), align_corners=False",
        {"size": (3, 8), "mode": "bilinear", "align_corners": False},
    ),
    (
        "bilinear, size=(3,8), align_corners=True",
        {"size": (3, 8), "mode": "bilinear", "align_corners": True},
    ),
    (
        "bilinear, scale_factor=1.5, recompute_scale_factor=False",
        {"scale_factor": 1.5, "mode": "bilinear", "recompute_scale_factor": False},
    ),
    ("bilinear, scale_factor=0.5 (downscale)", {"scale_factor": 0.5, "mode": "bilinear"}),
]:
    add(
        Case(
            "UpsampleBilinear2dConfig",
            "upsample_bilinear2d.vec",
            text,
            fn(lambda m, x, kw=kwargs: F.interpolate(x, **kw)),
            one(SMALL),
        )
    )
add(
    Case(
        "UpsampleBilinear2dConfig",
        "upsample_bilinear2d.vec",
        "bilinear, size=7, align_corners=True",
        fn(lambda m, x: F.interpolate(x, size=7, mode="bilinear", align_corners=True)),
        one(SMALL),
        FP16,
    )
)
add(
    Case(
        "UpsampleBilinear2dConfig",
        "_upsample_bilinear2d_aa.default",
        "bilinear, antialias=True, size=3",
        fn(lambda m, x: F.interpolate(x, size=3, mode="bilinear", antialias=True)),
        one(SMALL),
    )
)
for mode in ("nearest", "nearest-exact", "bicubic"):
    target = {
        "nearest": "upsample_nearest2d.vec",
        "nearest-exact": "_upsample_nearest_exact2d.vec",
        "bicubic": "upsample_bicubic2d.vec",
    }[mode]
    add(
        Case(
            "UpsampleBilinear2dConfig",
            target,
            f"mode={mode!r}, size=7",
            fn(lambda m, x, md=mode: F.interpolate(x, size=7, mode=md)),
            one(SMALL),
        )
    )
add(
    Case(
        "UpsampleBilinear2dConfig",
        "upsample_bilinear2d.vec",
        "bilinear, scale_factor=2, dynamic batch",
        fn(lambda m, x: F.interpolate(x, scale_factor=2, mode="bilinear")),
        one(torch.cat([SMALL, SMALL])),
        dynamic=({0: BATCH},),
    )
)

# --- data movement -------------------------------------------------------------------------
T = _rand(2, 3, 4, 5, seed=9)
for dim in (0, 1, -1, 2):
    add(
        Case(
            "CatConfig",
            "cat.default",
            f"dim={dim}, 2 tensors",
            fn(lambda m, x, y, d=dim: torch.cat([x, y], d)),
            two(T, T * 2),
        )
    )
for count in (3, 5, 6, 9):
    add(
        Case(
            "CatConfig",
            "cat.default",
            f"dim=1, {count} tensors",
            fn(lambda m, x, n=count: torch.cat([x * (i + 1) for i in range(n)], 1)),
            one(T),
        )
    )
add(
    Case(
        "CatConfig",
        "cat.default",
        "dim=1, 2 tensors",
        fn(lambda m, x, y: torch.cat([x, y], 1)),
        two(T, T * 2),
        FP16,
    )
)
for pad, value in (
    ((1, 1), 0.0),
    ((1, 2, 0, 3), -1.5),
    ((1, 0, 2, 1, 1, 1), 2.0),
    ((0, 0, 0, 0, 0, 0, 1, 1), 0.5),
    ((2, -1), 0.0),
):
    add(
        Case(
            "ConstantPadConfig",
            "constant_pad_nd.default",
            f"pad={list(pad)}, value={value}",
            fn(lambda m, x, p=pad, v=value: F.pad(x, p, value=v)),
            one(T),
        )
    )
add(
    Case(
        "ConstantPadConfig",
        "constant_pad_nd.default",
        "pad=[1, 2, 0, 3], value=-1.5",
        fn(lambda m, x: F.pad(x, (1, 2, 0, 3), value=-1.5)),
        one(T),
        FP16,
    )
)
for text, slicer in [
    ("dim=1, 1:3", lambda x: x[:, 1:3]),
    ("dim=-1, -3:", lambda x: x[..., -3:]),
    ("dim=3, 1:100 (end past size)", lambda x: x[:, :, :, 1:100]),
    ("dim=2, 1:-1", lambda x: x[:, :, 1:-1]),
    ("dim=3, step=2", lambda x: x[..., ::2]),
    ("dim=1, 1:3 and dim=3, 2:4", lambda x: x[:, 1:3, :, 2:4]),
]:
    add(
        Case(
            "SliceCopyConfig",
            "slice_copy.Tensor",
            text,
            fn(lambda m, x, s=slicer: s(x) * 1.0 + 0.0),
            one(T),
        )
    )
add(
    Case(
        "SliceCopyConfig",
        "slice_copy.Tensor",
        "dim=1, 1:3, dynamic batch",
        fn(lambda m, x: x[:, 1:3] + 1.0),
        one(T),
        dynamic=({0: BATCH},),
    )
)
for perm in ((0, 2, 3, 1), (3, 2, 1, 0)):
    add(
        Case(
            "PermuteConfig",
            "permute_copy.default",
            f"dims={list(perm)}",
            fn(lambda m, x, p=perm: x.permute(p) + 0.0),
            one(T),
        )
    )
for dim in (-1, 4, 0, 2):
    add(
        Case(
            "UnsqueezeCopyConfig",
            "unsqueeze_copy.default",
            f"dim={dim} of rank 4",
            fn(lambda m, x, d=dim: torch.unsqueeze(x, d) + 1.0),
            one(T),
        )
    )
for shape in ((6, 20), (-1, 5), (2, -1, 2)):
    add(
        Case(
            "ViewCopyConfig",
            "view_copy.default",
            f"shape={list(shape)}",
            fn(lambda m, x, s=shape: (x + 1.0).reshape(s) * 2.0),
            one(T),
        )
    )
add(
    Case(
        "ViewCopyConfig",
        "view_copy.default",
        "flatten(1), dynamic batch",
        fn(lambda m, x: (x + 1.0).flatten(1) * 2.0),
        one(T),
        dynamic=({0: BATCH},),
    )
)
add(
    Case(
        "CloneConfig",
        "clone.default",
        "clone (contiguous)",
        fn(lambda m, x: (x + 1.0).clone() * 2.0),
        one(T),
    )
)
add(
    Case(
        "CloneDimOrderConfig",
        "_clone_dim_order.default",
        "clone(memory_format=channels_last)",
        fn(lambda m, x: (x + 1.0).clone(memory_format=torch.channels_last) * 2.0),
        one(T),
    )
)
add(
    Case(
        "ToDimOrderCopyConfig",
        "_to_dim_order_copy.default",
        "to(memory_format=channels_last)",
        fn(lambda m, x: (x + 1.0).to(memory_format=torch.channels_last) * 2.0),
        one(T),
    )
)
add(
    Case(
        "ToDimOrderCopyConfig",
        "_to_dim_order_copy.default",
        "to(torch.float16)",
        fn(lambda m, x: (x + 1.0).to(torch.float16) * 2.0),
        one(T),
    )
)

# --- batch norm ------------------------------------------------------------------------------
add(
    Case(
        "BatchNormConfig",
        "_native_batch_norm_legit_no_training.default",
        "after conv2d (fused)",
        mod(lambda: nn.Sequential(nn.Conv2d(4, 4, 3), nn.BatchNorm2d(4))),
        one(_img()),
    )
)
add(
    Case(
        "BatchNormConfig",
        "_native_batch_norm_legit_no_training.default",
        "standalone, eps=1e-3",
        mod(lambda: nn.Sequential(nn.BatchNorm2d(4, eps=1e-3))),
        one(_img()),
    )
)
add(
    Case(
        "BatchNormConfig",
        "_native_batch_norm_legit_no_training.default",
        "after conv_transpose2d",
        mod(lambda: nn.Sequential(nn.ConvTranspose2d(4, 4, 3, stride=2), nn.BatchNorm2d(4))),
        one(_img()),
    )
)
add(
    Case(
        "BatchNormConfig",
        "_native_batch_norm_legit_no_training.default",
        "after linear (BatchNorm1d)",
        mod(lambda: nn.Sequential(nn.Linear(6, 4), nn.BatchNorm1d(4))),
        one(_rand(3, 6)),
    )
)

# --- GEMMs: convolution, linear, addmm, mm, bmm ------------------------------------------------
CONV_X = _img(4, 9, seed=10)
for text, factory in [
    ("conv2d k=3", lambda: nn.Conv2d(4, 6, 3)),
    ("conv2d k=3, padding=1, no bias", lambda: nn.Conv2d(4, 6, 3, padding=1, bias=False)),
    ("conv2d k=3, stride=2, padding=(1,2)", lambda: nn.Conv2d(4, 6, 3, stride=2, padding=(1, 2))),
    ("conv2d k=(3,2), stride=(2,1)", lambda: nn.Conv2d(4, 6, (3, 2), stride=(2, 1))),
    ("conv2d k=3, dilation=2, padding=2", lambda: nn.Conv2d(4, 6, 3, dilation=2, padding=2)),
    ("conv2d k=3, dilation=(1,2)", lambda: nn.Conv2d(4, 6, 3, dilation=(1, 2))),
    ("conv2d groups=2", lambda: nn.Conv2d(4, 6, 3, groups=2)),
    ("conv2d depthwise (groups=4), multiplier 2", lambda: nn.Conv2d(4, 8, 3, groups=4, padding=1)),
    ("conv2d padding='same', dilation=2", lambda: nn.Conv2d(4, 6, 3, padding="same", dilation=2)),
    (
        "conv2d padding_mode='reflect'",
        lambda: nn.Conv2d(4, 6, 3, padding=1, padding_mode="reflect"),
    ),
    (
        "conv2d padding_mode='circular'",
        lambda: nn.Conv2d(4, 6, 3, padding=1, padding_mode="circular"),
    ),
    (
        "conv1d k=3, stride=2, padding=1",
        lambda: nn.Sequential(nn.Flatten(2), nn.Conv1d(4, 6, 3, stride=2, padding=1)),
    ),
    (
        "conv1d groups=2, dilation=3",
        lambda: nn.Sequential(nn.Flatten(2), nn.Conv1d(4, 6, 3, groups=2, dilation=3)),
    ),
    ("conv_transpose2d k=3, stride=2", lambda: nn.ConvTranspose2d(4, 6, 3, stride=2)),
    (
        "conv_transpose2d k=3, stride=2, padding=1, output_padding=1",
        lambda: nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1),
    ),
    (
        "conv_transpose2d k=4, stride=(2,3), output_padding=(1,2)",
        lambda: nn.ConvTranspose2d(4, 6, 4, stride=(2, 3), output_padding=(1, 2)),
    ),
    ("conv_transpose2d groups=2", lambda: nn.ConvTranspose2d(4, 6, 3, groups=2)),
    ("conv_transpose2d dilation=2", lambda: nn.ConvTranspose2d(4, 6, 3, dilation=2)),
    (
        "conv_transpose2d stride=2, output_padding=1, dilation=2",
        lambda: nn.ConvTranspose2d(4, 6, 3, stride=2, output_padding=1, dilation=2),
    ),
    (
        "conv_transpose1d k=4, stride=2, padding=1",
        lambda: nn.Sequential(nn.Flatten(2), nn.ConvTranspose1d(4, 6, 4, stride=2, padding=1)),
    ),
]:
    add(Case("ConvolutionConfig", "convolution.default", text, mod(factory), one(CONV_X)))
for text, factory in [
    (
        "conv2d groups=2, stride=2, padding=1",
        lambda: nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2),
    ),
    (
        "conv_transpose2d stride=2, output_padding=1",
        lambda: nn.ConvTranspose2d(4, 6, 3, stride=2, output_padding=1),
    ),
]:
    add(Case("ConvolutionConfig", "convolution.default", text, mod(factory), one(CONV_X), FP16))
for text, factory, x in [
    ("with bias", lambda: nn.Linear(6, 5), _rand(3, 6, seed=11)),
    ("no bias", lambda: nn.Linear(6, 5, bias=False), _rand(3, 6, seed=11)),
    ("rank-3 input", lambda: nn.Linear(6, 5), _rand(2, 3, 6, seed=11)),
    ("rank-4 input, no bias", lambda: nn.Linear(6, 5, bias=False), _rand(2, 2, 3, 6, seed=11)),
    ("rank-1 input", lambda: nn.Linear(6, 5), _rand(6, seed=11)),
]:
    add(Case("LinearConfig", "linear.default", text, mod(factory), one(x)))
add(
    Case(
        "LinearConfig",
        "linear.default",
        "with bias",
        mod(lambda: nn.Linear(6, 5)),
        one(_rand(3, 6, seed=11)),
        FP16,
    )
)
add(
    Case(
        "LinearConfig",
        "linear.default",
        "with bias, dynamic batch",
        mod(lambda: nn.Linear(6, 5)),
        one(_rand(3, 6, seed=11)),
        dynamic=({0: BATCH},),
    )
)
for text, beta, alpha, bias_shape in [
    ("bias (5,), beta=1, alpha=1", 1.0, 1.0, (5,)),
    ("bias (5,), beta=0.5, alpha=2", 0.5, 2.0, (5,)),
    ("bias (5,), beta=0, alpha=1", 0.0, 1.0, (5,)),
    ("bias (3, 5)", 1.0, 1.0, (3, 5)),
    ("bias (3, 1)", 1.0, 1.0, (3, 1)),
    ("bias ()", 1.0, 1.0, ()),
]:
    add(
        Case(
            "AddmmConfig",
            "addmm.default",
            text,
            fn(
                lambda m, x, b=beta, a=alpha: torch.addmm(m.bias, x, m.w, beta=b, alpha=a),
                w=_rand(6, 5, seed=12),
                bias=_rand(*bias_shape, seed=13),
            ),
            one(_rand(3, 6, seed=11)),
        )
    )
add(
    Case(
        "MMConfig",
        "mm.default",
        "x @ W (parameter)",
        fn(lambda m, x: x @ m.w, w=_rand(6, 5, seed=12)),
        one(_rand(3, 6, seed=11)),
    )
)
add(
    Case(
        "MMConfig",
        "mm.default",
        "x @ W.t() (parameter)",
        fn(lambda m, x: x @ m.w.t(), w=_rand(5, 6, seed=12)),
        one(_rand(3, 6, seed=11)),
    )
)
add(
    Case(
        "MMConfig",
        "mm.default",
        "x @ y (both inputs)",
        fn(lambda m, x, y: x @ y),
        two(_rand(3, 6, seed=11), _rand(6, 5, seed=12)),
    )
)
add(
    Case(
        "BMMConfig",
        "bmm.default",
        "x @ y, batch 2",
        fn(lambda m, x, y: torch.bmm(x, y)),
        two(_rand(2, 3, 6, seed=11), _rand(2, 6, 5, seed=12)),
    )
)
add(
    Case(
        "BMMConfig",
        "bmm.default",
        "x @ y, batch 2",
        fn(lambda m, x, y: torch.bmm(x, y)),
        two(_rand(2, 3, 6, seed=11), _rand(2, 6, 5, seed=12)),
        FP16,
    )
)

# --- xnnfold's own GEMM configs: computed (weight_norm) weights with the same arguments ------------
for text, factory in [
    (
        "weight_norm conv2d groups=2, dilation=2, stride=2",
        lambda: nn.Conv2d(4, 6, 3, stride=2, dilation=2, groups=2),
    ),
    (
        "weight_norm conv2d depthwise, padding=1, no bias",
        lambda: nn.Conv2d(4, 4, 3, groups=4, padding=1, bias=False),
    ),
    (
        "weight_norm conv_transpose2d stride=2, padding=1, output_padding=1",
        lambda: nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1),
    ),
    (
        "weight_norm conv_transpose2d groups=2, dilation=2",
        lambda: nn.ConvTranspose2d(4, 6, 3, groups=2, dilation=2),
    ),
]:
    add(
        Case(
            "ConvolutionConfig",
            "convolution.default",
            text,
            mod(lambda f=factory: weight_norm(f())),
            one(CONV_X),
        )
    )
for text, factory, x in [
    ("weight_norm linear, bias", lambda: nn.Linear(6, 5), _rand(3, 6, seed=11)),
    (
        "weight_norm linear, no bias, rank-3 input",
        lambda: nn.Linear(6, 5, bias=False),
        _rand(2, 3, 6, seed=11),
    ),
]:
    add(
        Case(
            "LinearConfig", "linear.default", text, mod(lambda f=factory: weight_norm(f())), one(x)
        )
    )
for text, beta, alpha, bias_shape in [
    ("computed W = v * 1.5, bias (5,), beta=0.5, alpha=2", 0.5, 2.0, (5,)),
    ("computed W = v * 1.5, bias (3, 5)", 1.0, 1.0, (3, 5)),
]:
    add(
        Case(
            "AddmmConfig",
            "addmm.default",
            text,
            fn(
                lambda m, x, b=beta, a=alpha: torch.addmm(m.bias, x, m.w * 1.5, beta=b, alpha=a),
                w=_rand(6, 5, seed=12),
                bias=_rand(*bias_shape, seed=13),
            ),
            one(_rand(3, 6, seed=11)),
        )
    )
add(
    Case(
        "MMConfig",
        "mm.default",
        "x @ (v * 1.5).t() (computed)",
        fn(lambda m, x: x @ (m.w * 1.5).t(), w=_rand(5, 6, seed=12)),
        one(_rand(3, 6, seed=11)),
    )
)

# --- quantized (PT2E XNNPACKQuantizer) -----------------------------------------------------------
Q_IMG = _img(4, 9, seed=14)
for text, factory, x in [
    ("linear, with bias", lambda: nn.Linear(6, 5), _rand(3, 6, seed=11)),
    ("linear + relu", lambda: nn.Sequential(nn.Linear(6, 5), nn.ReLU()), _rand(3, 6, seed=11)),
    (
        "conv2d groups=2, stride=2, padding=1",
        lambda: nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2),
        Q_IMG,
    ),
    (
        "conv2d dilation=2 + relu",
        lambda: nn.Sequential(nn.Conv2d(4, 6, 3, dilation=2), nn.ReLU()),
        Q_IMG,
    ),
    ("conv2d depthwise, padding=1", lambda: nn.Conv2d(4, 4, 3, groups=4, padding=1), Q_IMG),
    (
        "conv_transpose2d stride=2, output_padding=1",
        lambda: nn.ConvTranspose2d(4, 6, 3, stride=2, output_padding=1),
        Q_IMG,
    ),
    (
        "conv2d + hardtanh(-1, 2)",
        lambda: nn.Sequential(nn.Conv2d(4, 6, 3), nn.Hardtanh(-1.0, 2.0)),
        Q_IMG,
    ),
    (
        "conv2d + max_pool2d(3, 2, padding=1)",
        lambda: nn.Sequential(nn.Conv2d(4, 6, 3), nn.MaxPool2d(3, 2, 1)),
        Q_IMG,
    ),
    (
        "conv2d + max_pool2d(2, 2, ceil_mode=True)",
        lambda: nn.Sequential(nn.Conv2d(4, 6, 2), nn.MaxPool2d(2, 2, ceil_mode=True)),
        Q_IMG,
    ),
    (
        "conv2d + adaptive_avg_pool2d(1)",
        lambda: nn.Sequential(nn.Conv2d(4, 6, 3), nn.AdaptiveAvgPool2d(1)),
        Q_IMG,
    ),
    (
        "conv2d + batch_norm (fused)",
        lambda: nn.Sequential(nn.Conv2d(4, 6, 3), nn.BatchNorm2d(6)),
        Q_IMG,
    ),
]:
    target = (
        "linear.default"
        if "linear" in text.split(",")[0] and "conv" not in text
        else "convolution.default"
    )
    add(
        Case(
            "LinearConfig" if target == "linear.default" else "ConvolutionConfig",
            target,
            text,
            mod(factory),
            one(x),
            INT8,
        )
    )
add(Case("AddConfig", "add.Tensor", "x + y", fn(lambda m, x, y: x + y), two(X48, Y48), INT8))
add(
    Case(
        "AddConfig",
        "add.Tensor",
        "relu(x + y)",
        fn(lambda m, x, y: torch.relu(x + y)),
        two(X48, Y48),
        INT8,
    )
)
add(Case("MulConfig", "mul.Tensor", "x * y", fn(lambda m, x, y: x * y), two(X48, Y48), INT8))
add(
    Case(
        "CatConfig",
        "cat.default",
        "dim=1, 3 tensors",
        fn(lambda m, x, y: torch.cat([x, y, x + y], 1)),
        two(T, T * 2),
        INT8,
    )
)
add(
    Case(
        "HardtanhConfig",
        "hardtanh.default",
        "conv2d + relu6",
        mod(lambda: nn.Sequential(nn.Conv2d(4, 6, 3), nn.ReLU6())),
        one(Q_IMG),
        INT8,
    )
)
add(
    Case(
        "QuantizedPerTensorConfig",
        "quantize_per_tensor.default",
        "linear (static)",
        mod(lambda: nn.Linear(6, 5)),
        one(_rand(3, 6, seed=11)),
        INT8,
    )
)
add(
    Case(
        "DeQuantizedPerTensorConfig",
        "dequantize_per_tensor.default",
        "conv2d (static)",
        mod(lambda: nn.Conv2d(4, 6, 3)),
        one(Q_IMG),
        INT8,
    )
)
add(
    Case(
        "LinearConfig",
        "linear.default",
        "linear, dynamic activations",
        mod(lambda: nn.Linear(6, 5)),
        one(_rand(3, 6, seed=11)),
        INT8_DYNAMIC,
    )
)
add(
    Case(
        "ConvolutionConfig",
        "convolution.default",
        "conv2d, dynamic activations",
        mod(lambda: nn.Conv2d(4, 6, 3)),
        one(Q_IMG),
        INT8_DYNAMIC,
    )
)
for config, target in (
    ("QuantizeAffineConfig", "quantize_affine.default"),
    ("DeQuantizeAffineConfig", "dequantize_affine.default"),
    ("ChooseQParamsAffineConfig", "choose_qparams_affine.default"),
):
    add(
        Case(
            config,
            target,
            "linear 8da4w (group 32), torchao quantize_",
            mod(lambda: nn.Linear(64, 8)),
            one(_rand(3, 64, seed=11)),
            INT4_AFFINE,
        )
    )
add(
    Case(
        "LinearConfig",
        "linear.default",
        "linear 8da4w (group 32), torchao quantize_",
        mod(lambda: nn.Linear(64, 8)),
        one(_rand(3, 64, seed=11)),
        INT4_AFFINE,
    )
)

CASES: tuple[Case, ...] = tuple(_CASES)
