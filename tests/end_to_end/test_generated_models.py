"""Generated models: random chains of GEMMs with randomly computed weights and biases.

The hand-written fixtures cover each way of computing a weight on one layer kind at a
time; a bug that needs two of them together (a transposed convolution after a reshape, a
computed bias on an addmm whose weight is a slice of a packed parameter) would slip
through. Here hypothesis draws a *description* of a small model (`ModelSpec`: plain data,
so it shrinks and prints readably), `build_model` turns it into an `nn.Module`, and the
property lowers it with the folding partitioner and checks, through executorch.runtime,
that every output matches eager and that every GEMM whose weight and bias are foldable
ends up delegated with exactly the computed roles folded.

The oracle (`expected_folds`) follows the documented rules: every pure computation of
parameters folds, except one whose folded tensor would be larger than the sources it
frees (a low-rank ``A @ B`` with ``rank * (rows + cols) < rows * cols``) when its GEMM
can take the weight at run time: a fully-connected GEMM is then delegated with it (and
its computed bias folded). A convolution has no run-time-weight form, so its growing
fold is spent from the default growth budget, which these tiny models never exceed.

What the property found is pinned below it, one minimal reproduction per bug (all fixed
now, so these are regression tests). The one known limit left is a strict xfail, and the
generator avoids it only where a comment marked KNOWN LIMIT says so and names that xfail.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Final, Optional

import pytest
import torch
import torch.nn.functional as F
from hypothesis import example, given, HealthCheck, note, settings
from hypothesis import strategies as st
from torch import nn
from torch.nn.utils import parametrize
from torch.nn.utils.parametrizations import spectral_norm, weight_norm
from torch.nn.utils.spectral_norm import spectral_norm as legacy_spectral_norm
from torch.nn.utils.weight_norm import weight_norm as legacy_weight_norm

import xnnfold

pytestmark = [pytest.mark.runtime, pytest.mark.slow]

SEED: Final = 20261130
# Drawn examples, each a lowering and a run of 2-3 s on a quiet 2-core machine: the full
# tier's seeded slice (beside COVERING_EXAMPLES) and the campaign tier's sweep.
MAX_EXAMPLES: Final = 12
CAMPAIGN_EXAMPLES: Final = 200

CONV_KINDS: Final = ("conv1d", "conv2d", "conv_transpose1d", "conv_transpose2d")
# Kinds that act on the channel dimension of a (N, C, *spatial) activation.
CHANNEL_KINDS: Final = ("linear", "matmul", "addmm")
KINDS: Final = CONV_KINDS + CHANNEL_KINDS
# Kinds that are one torch.nn module, so the module itself can be called.
MODULE_KINDS: Final = CONV_KINDS + ("linear",)
# The GEMMs each kind may lower to in the edge dialect: a linear, matmul or addmm with a
# computed weight may reach the partitioner as any fully-connected form.
FULLY_CONNECTED: Final = frozenset({"linear", "addmm", "mm"})
EDGE_OPS: Final = {
    "conv1d": frozenset({"convolution"}),
    "conv2d": frozenset({"convolution"}),
    "conv_transpose1d": frozenset({"convolution"}),
    "conv_transpose2d": frozenset({"convolution"}),
    "linear": FULLY_CONNECTED,
    "matmul": FULLY_CONNECTED,
    "addmm": FULLY_CONNECTED,
}

PARAMETRIZED_WAYS: Final = (
    "weight_norm_dim0",
    "weight_norm_dimNone",
    "spectral_norm",
)
LEGACY_WAYS: Final = ("legacy_weight_norm", "legacy_spectral_norm")
# Ways computed in forward: `weight * scale`, a parameter stored transposed, one chunk of
# a packed parameter whose other chunk is a second GEMM's weight, a low-rank product.
FORWARD_WAYS: Final = ("scaled", "transposed", "shared", "low_rank")
WEIGHT_WAYS: Final = ("plain",) + PARAMETRIZED_WAYS + LEGACY_WAYS + FORWARD_WAYS
# A bias that is a parameter, `bias * s`, the cat of two parameters, or a user
# parametrization (`ScaledBias`).
BIAS_WAYS: Final = ("none", "plain", "scaled", "cat", "parametrized")
COMPUTED_BIASES: Final = ("scaled", "cat", "parametrized")

# Largest spatial extent a layer may produce, to keep every model tiny.
MAX_EXTENT: Final = 16


# --------------------------------------------------------------------------------------
# The description.


@dataclass(frozen=True)
class LayerSpec:
    """One GEMM of the chain.

    Attributes:
        kind: a `KINDS` entry.
        out_channels: output channels (features for the channel kinds).
        kernel: odd kernel size of a convolution (1 otherwise); padding is ``kernel // 2``.
        stride: convolution stride (transposed: output_padding is ``stride - 1``).
        groups: convolution groups (``groups == in_channels`` is depthwise).
        weight: a `WEIGHT_WAYS` entry.
        bias: a `BIAS_WAYS` entry.
        rank: inner dimension of a ``low_rank`` weight (0 otherwise).
    """

    kind: str
    out_channels: int
    kernel: int = 1
    stride: int = 1
    groups: int = 1
    weight: str = "plain"
    bias: str = "plain"
    rank: int = 0


@dataclass(frozen=True)
class ModelSpec:
    """A chain of GEMMs on a (1, in_channels, *spatial) input, with tanh in between."""

    in_channels: int
    spatial: tuple[int, ...]
    layers: tuple[LayerSpec, ...]


def _spatial_rank(kind: str) -> Optional[int]:
    return {"conv1d": 1, "conv_transpose1d": 1, "conv2d": 2, "conv_transpose2d": 2}.get(kind)


def _adapt(spatial: tuple[int, ...], kind: str) -> tuple[int, ...]:
    """The spatial shape a layer sees: 1D kinds flatten a 2D activation, 2D kinds see a
    1D activation as one row."""
    rank = _spatial_rank(kind)
    if rank == 1 and len(spatial) == 2:
        return (spatial[0] * spatial[1],)
    if rank == 2 and len(spatial) == 1:
        return (1, spatial[0])
    return spatial


def _out_spatial(layer: LayerSpec, spatial: tuple[int, ...]) -> tuple[int, ...]:
    spatial = _adapt(spatial, layer.kind)
    if layer.kind.startswith("conv_transpose"):
        return tuple(n * layer.stride for n in spatial)
    if layer.kind in CONV_KINDS:
        return tuple((n - 1) // layer.stride + 1 for n in spatial)
    return spatial


def weight_shape(layer: LayerSpec, in_channels: int) -> tuple[int, ...]:
    """The weight the GEMM op takes (linear layout for the channel kinds)."""
    taps = (layer.kernel,) * (_spatial_rank(layer.kind) or 0)
    if layer.kind.startswith("conv_transpose"):
        return (in_channels, layer.out_channels // layer.groups, *taps)
    if layer.kind in CONV_KINDS:
        return (layer.out_channels, in_channels // layer.groups, *taps)
    return (layer.out_channels, in_channels)


def _weight_ways(kind: str, bias: str) -> tuple[str, ...]:
    # A legacy hook recomputes the weight in the module's forward pre-hook, so the module
    # must be called as it is: a module kind, with a bias the module itself holds.
    if kind in (*CONV_KINDS, "linear") and bias in ("none", "plain", "parametrized"):
        return WEIGHT_WAYS
    return tuple(w for w in WEIGHT_WAYS if w not in LEGACY_WAYS)


def _bias_ways(kind: str) -> tuple[str, ...]:
    if kind == "matmul":
        return ("none",)
    if kind == "addmm":
        return tuple(b for b in BIAS_WAYS if b != "none")
    return BIAS_WAYS


@st.composite
def layer_specs(draw: st.DrawFn, in_channels: int, spatial: tuple[int, ...]) -> LayerSpec:
    kind = draw(st.sampled_from(KINDS))
    kernel, stride, groups = 1, 1, 1
    if kind in CONV_KINDS:
        kernel = draw(st.sampled_from((1, 3, 5)))
        seen = _adapt(spatial, kind)
        grows = kind.startswith("conv_transpose")
        stride = draw(st.sampled_from((1, 2) if not grows or max(seen) * 2 <= MAX_EXTENT else (1,)))
        groups = draw(
            st.sampled_from([g for g in range(1, in_channels + 1) if in_channels % g == 0])
        )
        out_channels = groups * draw(st.integers(1, max(1, 8 // groups)))
        if out_channels < 2:
            out_channels = 2 * groups
    else:
        out_channels = draw(st.integers(2, 8))
    bias = draw(st.sampled_from(_bias_ways(kind)))
    weight = draw(st.sampled_from(_weight_ways(kind, bias)))
    rank = draw(st.integers(1, 4)) if weight == "low_rank" else 0
    return LayerSpec(kind, out_channels, kernel, stride, groups, weight, bias, rank)


@st.composite
def model_specs(draw: st.DrawFn, *, max_layers: int = 4) -> ModelSpec:
    in_channels = draw(st.integers(2, 6))
    if draw(st.booleans()):
        spatial: tuple[int, ...] = (draw(st.integers(3, 12)),)
    else:
        spatial = (draw(st.integers(2, 6)), draw(st.integers(2, 6)))
    channels, shape = in_channels, spatial
    layers = []
    for _ in range(draw(st.integers(1, max_layers))):
        layer = draw(layer_specs(channels, shape))
        layers.append(layer)
        channels, shape = layer.out_channels, _out_spatial(layer, shape)
    return ModelSpec(in_channels, spatial, tuple(layers))


# --------------------------------------------------------------------------------------
# The builder.


class ScaledBias(nn.Module):
    """A user parametrization of the bias."""

    def forward(self, bias: torch.Tensor) -> torch.Tensor:
        return bias * 0.5


class LowRank(nn.Module):
    """``A @ B`` reshaped to the weight; a submodule so its own mm has its own path."""

    def __init__(self, shape: tuple[int, ...], rank: int) -> None:
        super().__init__()
        self.shape = shape
        cols = math.prod(shape[1:])
        self.a = nn.Parameter(torch.randn(shape[0], rank) / math.sqrt(rank))
        self.b = nn.Parameter(torch.randn(rank, cols) / math.sqrt(cols))

    def forward(self) -> torch.Tensor:
        return (self.a @ self.b).view(self.shape)


def _module(layer: LayerSpec, in_channels: int, *, bias: bool) -> nn.Module:
    k, s, g, out = layer.kernel, layer.stride, layer.groups, layer.out_channels
    if layer.kind == "conv1d":
        return nn.Conv1d(in_channels, out, k, s, padding=k // 2, groups=g, bias=bias)
    if layer.kind == "conv2d":
        return nn.Conv2d(in_channels, out, k, s, padding=k // 2, groups=g, bias=bias)
    if layer.kind == "conv_transpose1d":
        return nn.ConvTranspose1d(
            in_channels, out, k, s, padding=k // 2, output_padding=s - 1, groups=g, bias=bias
        )
    if layer.kind == "conv_transpose2d":
        return nn.ConvTranspose2d(
            in_channels, out, k, s, padding=k // 2, output_padding=s - 1, groups=g, bias=bias
        )
    return nn.Linear(in_channels, out, bias=bias)


def _calls_module(layer: LayerSpec) -> bool:
    """The layer calls its torch.nn module (else it calls the functional op itself)."""
    return (
        layer.kind in MODULE_KINDS
        and layer.weight in ("plain",) + PARAMETRIZED_WAYS + LEGACY_WAYS
        and layer.bias in ("none", "plain", "parametrized")
    )


class GemmLayer(nn.Module):
    def __init__(self, layer: LayerSpec, in_channels: int) -> None:
        super().__init__()
        self.spec = layer
        self.shape = weight_shape(layer, in_channels)
        out = layer.out_channels
        # Where the weight comes from.
        self.core: Optional[nn.Module] = None
        if layer.weight in ("plain", "scaled") + PARAMETRIZED_WAYS + LEGACY_WAYS:
            core_bias = layer.bias in ("plain", "scaled", "parametrized")
            self.core = _module(layer, in_channels, bias=core_bias)
            if layer.weight == "weight_norm_dim0":
                weight_norm(self.core, dim=0)
            elif layer.weight == "weight_norm_dimNone":
                weight_norm(self.core, dim=None)
            elif layer.weight == "spectral_norm":
                spectral_norm(self.core)
            elif layer.weight == "legacy_weight_norm":
                legacy_weight_norm(self.core)
            elif layer.weight == "legacy_spectral_norm":
                legacy_spectral_norm(self.core)
            elif layer.weight == "scaled":
                self.scale = nn.Parameter(torch.tensor(0.75))
        elif layer.weight == "transposed":
            fan_in = math.prod(self.shape[1:])
            self.weight_t = nn.Parameter(
                torch.randn(self.shape[1], self.shape[0], *self.shape[2:]) / math.sqrt(fan_in)
            )
        elif layer.weight == "low_rank":
            self.factors = LowRank(self.shape, layer.rank)
        elif layer.weight == "shared":
            # Packed like an in_proj: chunk 0 is this GEMM's weight, chunk 1 the twin's.
            fan_in = math.prod(self.shape[1:])
            self.packed = nn.Parameter(torch.randn(2 * math.prod(self.shape)) / math.sqrt(fan_in))
            self.twin = TwinGemm(layer)
        # Where the bias comes from, when the core module does not hold it.
        if self.core is None and layer.bias in ("plain", "scaled", "parametrized"):
            self.bias = nn.Parameter(torch.randn(out) * 0.1)
        if layer.bias == "scaled":
            self.bias_scale = nn.Parameter(torch.tensor(1.5))
        if layer.bias == "cat":
            self.bias_a = nn.Parameter(torch.randn(out - out // 2) * 0.1)
            self.bias_b = nn.Parameter(torch.randn(out // 2) * 0.1)
        if layer.bias == "parametrized":
            parametrize.register_parametrization(
                self.core if self.core is not None else self, "bias", ScaledBias()
            )

    def computed_weight(self) -> torch.Tensor:
        way = self.spec.weight
        if way == "shared":
            return self.packed.chunk(2)[0].view(self.shape)
        if way == "transposed":
            return self.weight_t.transpose(0, 1)
        if way == "low_rank":
            return self.factors()
        assert self.core is not None
        if way == "scaled":
            return self.core.weight * self.scale
        return self.core.weight

    def computed_bias(self) -> Optional[torch.Tensor]:
        way = self.spec.bias
        if way == "none":
            return None
        if way == "cat":
            return torch.cat([self.bias_a, self.bias_b])
        bias = self.core.bias if self.core is not None else self.bias
        return bias * self.bias_scale if way == "scaled" else bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kind = self.spec.kind
        rank = _spatial_rank(kind)
        if rank == 1 and x.dim() == 4:
            x = x.flatten(2)
        elif rank == 2 and x.dim() == 3:
            x = x.unsqueeze(2)
        if _calls_module(self.spec):
            assert self.core is not None
            if kind == "linear":
                # `.contiguous()`: see the KNOWN LIMIT note in `gemm`.
                return self.core(x.movedim(1, -1).contiguous()).movedim(-1, 1)
            return self.core(x)
        y = gemm(self.spec, x, self.computed_weight(), self.computed_bias())
        if self.spec.weight == "shared":
            y = y + self.twin(x, self.packed.chunk(2)[1].view(self.shape), self.computed_bias())
        return y


def gemm(
    layer: LayerSpec, x: torch.Tensor, w: torch.Tensor, b: Optional[torch.Tensor]
) -> torch.Tensor:
    """The layer's GEMM as a functional call on a (N, C, *spatial) activation."""
    kind, k, s, g = layer.kind, layer.kernel, layer.stride, layer.groups
    if kind == "conv1d":
        return F.conv1d(x, w, b, s, k // 2, 1, g)
    if kind == "conv2d":
        return F.conv2d(x, w, b, s, k // 2, 1, g)
    if kind == "conv_transpose1d":
        return F.conv_transpose1d(x, w, b, s, k // 2, s - 1, g)
    if kind == "conv_transpose2d":
        return F.conv_transpose2d(x, w, b, s, k // 2, s - 1, g)
    # KNOWN LIMIT (test_bmm_of_a_transposed_activation_folds_its_computed_weight, strict
    # xfail): on a non-contiguous activation, torch's matmul becomes expand + bmm, whose
    # weight xnnfold does not fold (the bmm is delegated and computes it at run time),
    # which this oracle would count as a miss. Drop every `.contiguous()` of this file
    # once that test passes.
    channels_last = x.movedim(1, -1).contiguous()
    if kind == "linear":
        y = F.linear(channels_last, w, b)
    elif kind == "matmul":
        y = channels_last @ w.t()
    else:
        rows = channels_last.reshape(-1, channels_last.shape[-1])
        y = torch.addmm(b, rows, w.t()).view(*channels_last.shape[:-1], -1)
    return y.movedim(-1, 1)


class TwinGemm(nn.Module):
    """The second GEMM reading a packed parameter; a submodule so it has its own path."""

    def __init__(self, layer: LayerSpec) -> None:
        super().__init__()
        self.spec = layer

    def forward(self, x: torch.Tensor, w: torch.Tensor, b: Optional[torch.Tensor]) -> torch.Tensor:
        return gemm(self.spec, x, w, b)


class GeneratedModel(nn.Module):
    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.spec = spec
        channels = spec.in_channels
        layers = []
        for layer in spec.layers:
            layers.append(GemmLayer(layer, channels))
            channels = layer.out_channels
        self.layers = nn.ModuleList(layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i + 1 < len(self.layers):
                x = torch.tanh(x)
        return x


def _as_if_trained(model: nn.Module) -> None:
    """Move weight_norm magnitudes away from ``||v||`` (freshly applied, the computed
    weight would equal ``v`` bit for bit and a stored source could pass for the fold)."""
    with torch.no_grad():
        for name, tensor in model.named_parameters():
            if name.endswith("parametrizations.weight.original0") or name.endswith("weight_g"):
                tensor.mul_(torch.empty_like(tensor).uniform_(0.5, 1.5))


def build_model(spec: ModelSpec) -> nn.Module:
    """A fresh eval-mode model for ``spec``; every call returns equal parameters."""
    with torch.random.fork_rng():
        torch.manual_seed(SEED)
        model = GeneratedModel(spec)
        _as_if_trained(model)
    return model.eval()


def make_inputs(spec: ModelSpec) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(SEED + 1)
    return (torch.randn(1, spec.in_channels, *spec.spatial, generator=generator),)


def reproduction(spec: ModelSpec) -> str:
    """Code that rebuilds and lowers the failing example, with one line per layer."""
    lines = ["from tests.end_to_end.test_generated_models import *", f"spec = {spec!r}"]
    channels = spec.in_channels
    for i, layer in enumerate(spec.layers):
        shape = weight_shape(layer, channels)
        call = "module call" if _calls_module(layer) else "functional call"
        extra = f" rank={layer.rank}" if layer.rank else ""
        extra += (
            " (+ a twin GEMM on the packed parameter's other chunk)"
            if layer.weight == "shared"
            else ""
        )
        lines.append(
            f"# layers.{i}: {layer.kind} {channels}->{layer.out_channels} ({call}), "
            f"weight {list(shape)} = {layer.weight}{extra}, bias = {layer.bias}"
            + (
                f", k={layer.kernel} s={layer.stride} groups={layer.groups}"
                if layer.kind in CONV_KINDS
                else ""
            )
        )
        channels = layer.out_channels
    lines += [
        "model, inputs = build_model(spec), make_inputs(spec)",
        "expected = model(*inputs)",
        "edge = xnnfold.lower(model, inputs)",
        "print(xnnfold.explain(edge).table())",
        "(out,) = xnnfold.run_pte(edge.to_executorch().buffer, inputs)",
        "torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)",
    ]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------
# The oracle.


@dataclass(frozen=True)
class Expected:
    """What lowering must do with one layer's GEMM.

    Attributes:
        path: module path of the GEMM (the module that calls the op).
        ops: the edge GEMM ops it may lower to.
        delegated: the GEMM must end up inside a delegate (False: its weight must not
            be folded; the fully-connected ops may still be delegated with a run-time
            weight, and then a computed bias is folded).
        folded: the roles that must be folded when delegated (weight before bias).
    """

    path: str
    ops: frozenset[str]
    delegated: bool
    folded: tuple[str, ...]


def _weight_computed(layer: LayerSpec) -> bool:
    # A parameter the op reads as it is; the channel kinds' `w.t()` is a computation.
    return layer.weight != "plain" or layer.kind in ("matmul", "addmm")


def _fold_growth(layer: LayerSpec, in_channels: int) -> int:
    """Bytes folding ``layer``'s weight adds: a low-rank product stores its full weight
    and frees its two factors (fp32); every other way frees at least what it stores."""
    if layer.weight != "low_rank":
        return 0
    shape = weight_shape(layer, in_channels)
    rows, cols = shape[0], math.prod(shape[1:])
    return 4 * (rows * cols - layer.rank * (rows + cols))


def _weight_foldable(layer: LayerSpec, in_channels: int) -> bool:
    # A fold that grows the program is declined where the GEMM takes its weight at run
    # time (the fully-connected kinds) and spent from the growth budget where it has no
    # such form (a convolution); `expected_folds` checks the budget holds them all.
    return _fold_growth(layer, in_channels) <= 0 or layer.kind in CONV_KINDS


def expected_folds(spec: ModelSpec) -> list[Expected]:
    result = []
    channels = spec.in_channels
    growth = 0
    for i, layer in enumerate(spec.layers):
        if layer.kind in CONV_KINDS:
            growth += max(0, _fold_growth(layer, channels))
        # The oracle admits every growing convolution fold: true while the model's growth
        # stays within the default budget's per-method floor (these models are tiny).
        assert growth <= xnnfold.DEFAULT_GROWTH_BUDGET.max_fold_bytes, spec
        path = f"layers.{i}.core" if _calls_module(layer) else f"layers.{i}"
        if _weight_foldable(layer, channels):
            roles = ("weight",) if _weight_computed(layer) else ()
            roles += ("bias",) if layer.bias in COMPUTED_BIASES else ()
            result.append(Expected(path, EDGE_OPS[layer.kind], True, roles))
            if layer.weight == "shared":
                # The twin reads the packed parameter's other chunk and the same bias.
                result.append(Expected(f"{path}.twin", EDGE_OPS[layer.kind], True, roles))
        else:
            bias = ("bias",) if layer.bias in COMPUTED_BIASES else ()
            result.append(Expected(path, EDGE_OPS[layer.kind], False, bias))
        channels = layer.out_channels
    return result


def check(spec: ModelSpec, *, log: Callable[[str], None] = note) -> None:
    """Lower ``spec``'s model with folding; check delegation, folds and outputs."""
    log(reproduction(spec))
    model, inputs = build_model(spec), make_inputs(spec)
    with torch.no_grad():
        expected = model(*inputs)
    edge = xnnfold.lower(model, inputs)
    report = xnnfold.explain(edge)
    log(report.table())
    wanted = expected_folds(spec)
    for want in wanted:
        rows = [r for r in report.rows if r.module == want.path]
        assert len(rows) == 1, f"{want.path}: expected one GEMM, got {rows}"
        (row,) = rows
        folded = want.folded
        if want.delegated:
            assert row.op in want.ops, f"{want.path}: {row.op}, want one of {sorted(want.ops)}"
            assert row.delegated, f"{want.path}: foldable GEMM left outside: {row.reason}"
        elif not row.delegated:
            folded = ()
        assert row.folded == folded, f"{want.path}: folded {row.folded}, want {folded}"
    # Any other GEMM (a low-rank product) has static operands: delegated or folded.
    paths = {w.path for w in wanted}
    others = [r for r in report.rows if r.module not in paths]
    assert all(r.delegated for r in others), report.table()
    (out,) = xnnfold.run_pte(edge.to_executorch().buffer, inputs)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)


L = LayerSpec
# Together these cover every layer kind, weight way and bias way at least once, whatever
# the random examples draw; the last two sit on either side of the size rule.
COVERING_EXAMPLES: Final = (
    ModelSpec(
        3,
        (5,),
        (
            L("conv1d", 6, 3, 1, 3, "legacy_weight_norm", "parametrized"),
            L("conv_transpose2d", 4, 3, 2, 2, "spectral_norm", "none"),
            L("linear", 5, weight="weight_norm_dim0", bias="plain"),
            L("matmul", 4, weight="shared", bias="none"),
        ),
    ),
    ModelSpec(
        4,
        (3, 3),
        (
            L("conv2d", 4, 3, 2, 4, "legacy_spectral_norm", "parametrized"),
            L("addmm", 6, weight="weight_norm_dimNone", bias="cat"),
            L("conv_transpose1d", 4, 1, 2, 1, "transposed", "scaled"),
            L("conv2d", 8, 1, 1, 1, "low_rank", "plain", rank=4),
        ),
    ),
    ModelSpec(
        2,
        (6,),
        (
            L("conv1d", 4, 5, 2, 2, "scaled", "cat"),
            L("addmm", 3, weight="plain", bias="plain"),
            L("conv_transpose1d", 2, 3, 1, 1, "weight_norm_dim0", "scaled"),
            L("conv2d", 4, 3, 1, 2, "shared", "cat"),
        ),
    ),
    # rank * (rows + cols) == rows * cols: folds. One rank less: grows, stays unfolded.
    ModelSpec(4, (3,), (L("linear", 4, weight="low_rank", bias="scaled", rank=2),)),
    ModelSpec(4, (3,), (L("linear", 4, weight="low_rank", bias="scaled", rank=1),)),
)


def _with_examples(test: Callable[[ModelSpec], None]) -> Callable[[ModelSpec], None]:
    for spec in reversed(COVERING_EXAMPLES):
        test = example(spec)(test)
    return test


def _property_settings(max_examples: int) -> Any:
    """Hypothesis settings of the property: seeded (derandomized), no deadline."""
    return settings(
        max_examples=max_examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


@_property_settings(MAX_EXAMPLES)
@given(model_specs())
@_with_examples
def test_generated_model_folds_and_matches_eager(spec: ModelSpec) -> None:
    check(spec)


@pytest.mark.campaign
@_property_settings(CAMPAIGN_EXAMPLES)
@given(model_specs())
def test_many_generated_models_fold_and_match_eager(spec: ModelSpec) -> None:
    check(spec)


# --------------------------------------------------------------------------------------
# Minimal reproductions of what the property found.


class LowRankLinear(nn.Module):
    """``F.linear(x, A @ B)`` with 24 floats of factors for a 16-float weight."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Parameter(torch.randn(4, 3))
        self.b = nn.Parameter(torch.randn(3, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.a @ self.b)


def test_low_rank_product_smaller_than_its_factors_is_folded() -> None:
    # The `A @ B` inside the computation is itself an mm reading B at its weight
    # position; B used to count as another GEMM's stored weight, which freed nothing.
    torch.manual_seed(SEED)
    model, x = LowRankLinear().eval(), torch.randn(2, 4)
    edge = xnnfold.lower(model, (x,))
    report = xnnfold.explain(edge)
    (row,) = report.rows
    assert row.delegated and row.folded == ("weight",), report.table()
    (out,) = xnnfold.run_pte(edge.to_executorch().buffer, (x,))
    torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-4)


class ChainedPacked(nn.Module):
    """Two chained linears on the channels of a (N, C, L) activation, whose weights are
    the two halves of one packed parameter."""

    def __init__(self) -> None:
        super().__init__()
        self.packed = nn.Parameter(torch.randn(12))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w1, w2 = self.packed.split([6, 6])
        h = F.linear(x.movedim(1, -1), w1.view(3, 2)).movedim(-1, 1)
        return F.linear(h.movedim(1, -1), w2.view(2, 3))


def test_chained_gemms_sharing_a_packed_parameter_lower_and_match_eager() -> None:
    torch.manual_seed(SEED)
    model, x = ChainedPacked().eval(), torch.randn(1, 2, 6)
    edge = xnnfold.lower(model, (x,))
    report = xnnfold.explain(edge)
    assert not report.outside and len(report.folded) == 2, report.table()
    (out,) = xnnfold.run_pte(edge.to_executorch().buffer, (x,))
    torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-4)


class ScaledBiasCalledTwice(nn.Module):
    """A Linear whose bias parametrization is ``bias * 0.5``, called twice."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 4)
        parametrize.register_parametrization(self.layer, "bias", ScaledBias())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(torch.tanh(self.layer(x)))


def test_module_called_twice_with_a_scalar_scaled_bias_is_folded() -> None:
    torch.manual_seed(SEED)
    model, x = ScaledBiasCalledTwice().eval(), torch.randn(2, 4)
    edge = xnnfold.lower(model, (x,))
    report = xnnfold.explain(edge)
    assert [r.folded for r in report.rows] == [("bias",), ("bias",)], report.table()
    (out,) = xnnfold.run_pte(edge.to_executorch().buffer, (x,))
    torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-4)


class TransposedActivationGemm(nn.Module):
    """A GEMM on ``x.movedim(1, -1)``: torch's matmul and linear turn a non-contiguous
    3D activation times a weight that requires grad into expand + bmm, not view + mm."""

    def __init__(self, *, weight: str, op: str) -> None:
        super().__init__()
        self.weight, self.op = weight, op
        self.a = nn.Parameter(torch.randn(2, 1))
        self.b = nn.Parameter(torch.randn(1, 2))  # A @ B: 4 floats from 4: folds
        self.proj = weight_norm(nn.Linear(2, 2, bias=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.movedim(1, -1)
        if self.op == "module":
            return self.proj(h)
        w = self.a @ self.b if self.weight == "low_rank" else self.proj.weight
        return F.linear(h, w) if self.op == "linear" else h @ w.t()


TRANSPOSED_CASES = [
    ("weight_norm", "module"),
    ("weight_norm", "matmul"),
    ("low_rank", "linear"),
    ("low_rank", "matmul"),
]


def _lower_transposed(weight: str, op: str) -> tuple[nn.Module, torch.Tensor, Any]:
    torch.manual_seed(SEED)
    model, x = TransposedActivationGemm(weight=weight, op=op).eval(), torch.randn(1, 2, 3)
    return model, x, xnnfold.lower(model, (x,))


@pytest.mark.parametrize(("weight", "op"), TRANSPOSED_CASES)
def test_gemm_of_a_transposed_activation_lowers_and_matches_eager(weight: str, op: str) -> None:
    # Regression: ops kept undecomposed for a linear/matmul that torch then turns into
    # expand + bmm used to abort lowering ("kept ... but the GEMM was not delegated").
    model, x, edge = _lower_transposed(weight, op)
    assert not xnnfold.explain(edge).outside, xnnfold.explain(edge).table()
    (out,) = xnnfold.run_pte(edge.to_executorch().buffer, (x,))
    torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("weight", "op"), [("weight_norm", "module"), ("low_rank", "linear")])
def test_linear_of_a_transposed_activation_folds_its_computed_weight(weight: str, op: str) -> None:
    _, _, edge = _lower_transposed(weight, op)
    (row,) = [r for r in xnnfold.explain(edge).rows if r.op == "linear"]
    assert row.folded == ("weight",), xnnfold.explain(edge).table()


@pytest.mark.xfail(
    strict=True,
    reason="limit: `x.movedim(1, -1) @ w.t()` decomposes to expand + bmm, and xnnfold does "
    "not fold bmm operands: the bmm is delegated and its weight computed at run time",
)
@pytest.mark.parametrize(("weight", "op"), [("weight_norm", "matmul"), ("low_rank", "matmul")])
def test_bmm_of_a_transposed_activation_folds_its_computed_weight(weight: str, op: str) -> None:
    _, _, edge = _lower_transposed(weight, op)
    assert xnnfold.explain(edge).folded, xnnfold.explain(edge).table()


class AfterLegacyWeightNormLinear(nn.Module):
    """A legacy weight_norm Linear, then a linear whose weight is ``W_t.t()``."""

    def __init__(self) -> None:
        super().__init__()
        self.first = legacy_weight_norm(nn.Linear(4, 5))
        self.w_t = nn.Parameter(torch.randn(5, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(torch.tanh(self.first(x)), self.w_t.t())


def test_gemm_after_a_legacy_weight_norm_linear_lowers() -> None:
    torch.manual_seed(SEED)
    model, x = AfterLegacyWeightNormLinear().eval(), torch.randn(3, 4)
    edge = xnnfold.lower(model, (x,))
    report = xnnfold.explain(edge)
    assert not report.outside and len(report.folded) == 2, report.table()
    (out,) = xnnfold.run_pte(edge.to_executorch().buffer, (x,))
    torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-4)
