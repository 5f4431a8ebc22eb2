"""Building a description into eval-mode ``nn.Module``s (one per method), example
inputs and dynamic shapes (`build_program`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, cast, Optional

import torch
import torch.nn.functional as F
from torch import nn
from torch.export import Dim
from torch.nn.utils.parametrizations import spectral_norm, weight_norm
from torch.nn.utils.spectral_norm import spectral_norm as legacy_spectral_norm
from torch.nn.utils.weight_norm import weight_norm as legacy_weight_norm

from tests.support.grammar._constants import (
    BIAS_STD,
    CONV_KINDS,
    DYNAMIC_MAX_BATCH,
    SOURCE_STD,
    WEIGHT_GAIN,
)
from tests.support.grammar._description import (
    DegenerateProgram,
    Expr,
    Gemm,
    Method,
    Program,
    Source,
    Src,
)
from tests.support.grammar._evaluate import _Env, expr_shape
from tests.support.grammar._walk import program_exprs, sources_of


class _Holder(nn.Module):
    """Holds one source as ``weight``; calling it reads the source, so a legacy hook
    (which recomputes ``weight`` in a forward pre-hook) runs on each read."""

    def __init__(self, value: torch.Tensor, kind: str) -> None:
        super().__init__()
        if kind == "param":
            self.weight: torch.Tensor = nn.Parameter(value)
        elif kind == "buffer":
            self.register_buffer("weight", value)
        else:
            self.weight = value  # a plain tensor attribute: export lifts it as a constant

    def forward(self) -> torch.Tensor:
        return self.weight


def _parametrize(module: nn.Module, how: str, name: str = "weight") -> None:
    if how == "weight_norm":
        weight_norm(module, name, dim=0)
    elif how == "weight_norm_none":
        # torch annotates dim as int; its docstring documents dim=None (norm over the whole tensor).
        weight_norm(module, name, dim=None)  # type: ignore[arg-type]
    elif how == "spectral_norm":
        spectral_norm(module, name)
    elif how == "legacy_weight_norm":
        legacy_weight_norm(module, name)
    elif how == "legacy_spectral_norm":
        legacy_spectral_norm(module, name)


def _initial_value(src: Source, gen: torch.Generator) -> torch.Tensor:
    if src.shape == ():
        # 0-d sources are `.item()` scalars: keep them away from zero.
        value = 0.5 + torch.rand((), generator=gen)
    else:
        value = torch.randn(src.shape, generator=gen) * SOURCE_STD
    return value.to(getattr(torch, src.dtype))


def _core_module(layer: Gemm) -> nn.Module:
    k, s, p, d, g = layer.kernel, layer.stride, layer.padding, layer.dilation, layer.groups
    bias = layer.bias is not None
    cin, cout = layer.in_ch, layer.out_ch
    if layer.kind == "conv1d":
        return nn.Conv1d(cin, cout, k, s, p, d, g, bias)
    if layer.kind == "conv2d":
        return nn.Conv2d(cin, cout, k, s, p, d, g, bias)
    if layer.kind == "conv_transpose1d":
        return nn.ConvTranspose1d(cin, cout, k, s, p, layer.output_padding, g, bias, d)
    if layer.kind == "conv_transpose2d":
        return nn.ConvTranspose2d(cin, cout, k, s, p, layer.output_padding, g, bias, d)
    return nn.Linear(cin, cout, bias)


def _fan_in(layer: Gemm) -> int:
    if layer.kind in CONV_KINDS:
        taps = layer.kernel ** (2 if layer.kind.endswith("2d") else 1)
        return max(1, layer.in_ch // layer.groups * taps)
    return layer.in_ch


class _GemmLayer(nn.Module):
    """The GEMM itself, so explain() names it ``layers.<i>`` (``layers.<i>.core`` when it
    calls its module). Weight computations run in the method module, not here, so their
    own GEMMs (a low-rank ``a @ b``) are never mistaken for this one."""

    def __init__(self, spec: Gemm, core: Optional[nn.Module]) -> None:
        super().__init__()
        self.spec = spec
        self.core = core

    def forward(
        self, x: torch.Tensor, w: Optional[torch.Tensor], b: Optional[torch.Tensor]
    ) -> torch.Tensor:
        L = self.spec
        batch = x.shape[0]
        if L.kind in CONV_KINDS:
            if L.kind.endswith("1d") and x.dim() == 4:
                x = x.flatten(2)
            elif L.kind.endswith("2d") and x.dim() == 3:
                x = x.unsqueeze(2)
            if self.core is not None:
                return self.core(x)
            assert w is not None
            if L.kind == "conv1d":
                return F.conv1d(x, w, b, L.stride, L.padding, L.dilation, L.groups)
            if L.kind == "conv2d":
                return F.conv2d(x, w, b, L.stride, L.padding, L.dilation, L.groups)
            fn = F.conv_transpose1d if L.kind == "conv_transpose1d" else F.conv_transpose2d
            return fn(x, w, b, L.stride, L.padding, L.output_padding, L.groups, L.dilation)
        spatial = tuple(x.shape[2:])
        if L.act == 1:
            h = x.mean(dim=[0, *range(2, x.dim())])
        elif L.act == 3:
            # Contiguous: a strided batched activation decomposes to bmm (docs/limits.md,
            # "What stays on portable, or is not folded").
            h = x.flatten(2).transpose(1, 2).contiguous()
        else:
            h = x.movedim(1, -1).reshape(-1, L.in_ch)
        if self.core is not None:
            y = self.core(h)
        elif L.kind == "linear":
            y = F.linear(h, cast(torch.Tensor, w), b)
        elif L.kind == "addmm":
            y = torch.addmm(
                cast(torch.Tensor, b), h, cast(torch.Tensor, w), beta=L.beta, alpha=L.alpha
            )
        elif L.kind == "mm":
            y = torch.mm(h, cast(torch.Tensor, w))
        elif L.kind == "matmul":
            y = h @ cast(torch.Tensor, w)
        else:
            y = h @ cast(torch.Tensor, w).t()
        if b is not None and L.kind in ("mm", "matmul", "matmul_t"):
            y = y + b
        if L.act == 1:
            return y.reshape(1, L.out_ch, 1)
        if L.act == 3:
            return y.transpose(1, 2).reshape(batch, L.out_ch, *spatial)
        return y.reshape(batch, *spatial, L.out_ch).movedim(-1, 1)


class _MethodModule(nn.Module):
    def __init__(
        self,
        spec: Method,
        holders: nn.ModuleDict,
        layers: list[_GemmLayer],
        factors: dict[tuple[int, str], float],
        frozen: dict[tuple[int, str], nn.Parameter],
    ) -> None:
        super().__init__()
        self.spec = spec
        self.sources = holders
        self.layers = nn.ModuleList(layers)
        self.factors = factors
        # The hand-folded twin keeps each computed weight and bias as a parameter here.
        self.frozen = nn.ParameterDict({f"{i}_{role}": p for (i, role), p in frozen.items()})

    def _env(self) -> _Env:
        return _Env({name: holder for name, holder in self.sources.items()})

    def _arg(
        self, env: _Env, index: int, role: str, expr: Optional[Expr]
    ) -> Optional[torch.Tensor]:
        key = f"{index}_{role}"
        if key in self.frozen:
            return self.frozen[key]
        if expr is None:
            return None
        value = env.eval(expr)
        factor = self.factors.get((index, role))
        return value * factor if factor is not None else value

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        env = self._env()
        if self.spec.kind == "embed":
            assert self.spec.table is not None
            return F.embedding(x, env.eval(self.spec.table))
        for i, (layer, spec) in enumerate(zip(self.layers, self.spec.layers)):
            if i:
                x = torch.tanh(x)
            if layer.core is not None:
                x = layer(x, None, None)
                continue
            w = self._arg(env, i, "weight", spec.weight)
            b = self._arg(env, i, "bias", spec.bias)
            x = layer(x, w, b)
        for e in self.spec.side:
            x = x + torch.tanh(env.eval(e)).mean()
        return x


@dataclass
class BuiltProgram:
    """Eval-mode modules, example inputs and dynamic shapes, one entry per method.

    ``check_inputs`` holds, per method, further inputs to run (another batch size for a
    dynamic method)."""

    modules: dict[str, nn.Module]
    inputs: dict[str, tuple[torch.Tensor, ...]]
    dynamic_shapes: dict[str, Optional[tuple[Any, ...]]]
    check_inputs: dict[str, list[tuple[torch.Tensor, ...]]] = field(default_factory=dict)


def _method_inputs(
    method: Method, batch: int, gen: torch.Generator, vocab: int
) -> tuple[torch.Tensor, ...]:
    if method.kind == "embed":
        return (torch.randint(0, vocab, (batch, method.spatial[0]), generator=gen),)
    return (torch.randn((batch, method.in_ch, *method.spatial), generator=gen),)


def build_program(program: Program, *, hand_folded: bool = False) -> BuiltProgram:
    """Build ``program`` (deterministic: every value comes from ``program.seed``).

    With ``hand_folded``, every computed weight and bias of a GEMM is evaluated once and
    stored as a parameter instead (module calls lose their parametrizations): the model
    a user would write by hand, for "would XNNPACK take this GEMM with a static weight?".

    Raises:
        DegenerateProgram: a computed weight or an output is not finite.
    """
    sources = {s.name: s for s in program.sources}
    gen = torch.Generator().manual_seed(program.seed)
    # spectral_norm draws its power-iteration vectors from the global generator, and so
    # do modules' default initialisations: without this, two builds of one description
    # (the lowered model and the eager reference) would differ.
    torch.manual_seed(program.seed)
    used = {n for _, _, _, e in program_exprs(program) for n in sources_of(e)}
    values = {s.name: _initial_value(s, gen) for s in program.sources if s.name in used}
    # Sources a layer's own module holds (module calls) are not holders.
    owned: set[str] = set()
    for method in program.methods:
        for layer in method.layers:
            if layer.module:
                owned |= sources_of(layer.weight) | (
                    sources_of(layer.bias) if layer.bias else set()
                )
    holders = nn.ModuleDict()
    for name in sorted(used - owned):
        src = sources[name]
        holder = _Holder(values[name], src.kind)
        if src.param != "none":
            _parametrize(holder, src.param)
        holders[name] = holder
    env = _Env({name: holder for name, holder in holders.items()})

    modules: dict[str, nn.Module] = {}
    inputs: dict[str, tuple[torch.Tensor, ...]] = {}
    dynamic: dict[str, Optional[tuple[Any, ...]]] = {}
    checks: dict[str, list[tuple[torch.Tensor, ...]]] = {}
    vocab = max((expr_shape(m.table, sources)[0] for m in program.methods if m.table), default=1)
    for method in program.methods:
        layers: list[_GemmLayer] = []
        factors: dict[tuple[int, str], float] = {}
        frozen: dict[tuple[int, str], nn.Parameter] = {}
        for i, layer in enumerate(method.layers):
            core = None
            if layer.module:
                core = _core_module(layer)
                assert isinstance(layer.weight, Src)
                with torch.no_grad():
                    cast(torch.Tensor, core.weight).copy_(values[layer.weight.name])
                    if layer.bias is not None:
                        assert isinstance(layer.bias, Src)
                        cast(torch.Tensor, core.bias).copy_(values[layer.bias.name])
                if not hand_folded:
                    _parametrize(core, sources[layer.weight.name].param)
                    if layer.bias is not None:
                        _parametrize(core, sources[layer.bias.name].param, "bias")
                else:
                    with torch.no_grad():
                        probe = _Holder(values[layer.weight.name].clone(), "param")
                        _parametrize(probe, sources[layer.weight.name].param)
                        cast(torch.Tensor, core.weight).copy_(probe())
                        if layer.bias is not None:
                            probe = _Holder(values[layer.bias.name].clone(), "param")
                            _parametrize(probe, sources[layer.bias.name].param)
                            cast(torch.Tensor, core.bias).copy_(probe())
                core.eval()
            layers.append(_GemmLayer(layer, core))
            if core is not None:
                continue
            for role, e, target in (
                ("weight", layer.weight, WEIGHT_GAIN / math.sqrt(_fan_in(layer))),
                ("bias", layer.bias, BIAS_STD),
            ):
                if e is None:
                    continue
                with torch.no_grad():
                    value = env.eval(e).detach()
                if not torch.isfinite(value).all():
                    raise DegenerateProgram(f"{method.name}.layers.{i}.{role} is not finite")
                if not isinstance(e, Src):
                    spread = float(value.std()) if value.numel() > 1 else float(value.abs())
                    spread = (
                        spread
                        if math.isfinite(spread) and spread > 1e-6
                        else float(value.abs().max()) + 1.0
                    )
                    factors[(i, role)] = float(f"{target / spread:.6g}")
                    value = value * factors[(i, role)]
                stored = (
                    isinstance(e, Src)
                    and sources[e.name].param == "none"
                    and (sources[e.name].dtype == "float32")
                )
                if hand_folded and not stored:
                    frozen[(i, role)] = nn.Parameter(value.detach().clone())
        module = _MethodModule(method, holders, layers, factors, frozen).eval()
        modules[method.name] = module
        example = _method_inputs(method, method.batch, gen, vocab)
        inputs[method.name] = example
        checks[method.name] = []
        if method.dynamic:
            batch = Dim(f"batch_{method.name}", min=2, max=DYNAMIC_MAX_BATCH)
            dynamic[method.name] = ({0: batch},)
            checks[method.name].append(_method_inputs(method, method.batch + 1, gen, vocab))
        else:
            dynamic[method.name] = None
        with torch.no_grad():
            out = module(*example)
        if not torch.isfinite(out).all():
            raise DegenerateProgram(f"{method.name}: eager output is not finite")
    return BuiltProgram(modules, inputs, dynamic, checks)
