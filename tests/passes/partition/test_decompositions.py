"""The filter-free decomposition path: taken only when it changes nothing but the time.

`XnnpackFoldingPartitioner.ops_to_not_decompose` returns no per-node filter when
`filter_is_redundant` proves the filter would accept everything executorch could show it;
executorch then skips two decomposition passes. These tests pin the proof's one assumption
(the listed ops decompose to exactly the listed ops), each way the proof must refuse, and
that the lowered program is byte-identical to the one the filter path gives.
"""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch
from executorch.exir import to_edge_transform_and_lower
from executorch.exir.program._program import _default_decomposition_table
from torch import nn
from torch.export import Dim, ExportedProgram
from torch.nn import functional as F
from torch.nn.utils.parametrizations import spectral_norm, weight_norm

import xnnfold.passes.partition._aten_stage as aten_stage_module
from xnnfold import prepare_for_xnnpack, run_pte
from xnnfold._meta import CUSTOM_META_KEY, PRESERVED_META_KEY
from xnnfold.fixtures import FIXTURES, LAYERS, NORMS
from xnnfold.passes import XnnpackFoldingPartitioner
from xnnfold.passes._ops import DECOMPOSES_ONLY_TO
from xnnfold.passes.partition._decompositions import decomposed_ops, filter_is_redundant

from tests._lowering import fixture_by_name
from tests._tiers import campaign_unless

# The full tier: the fast tier covers each rule in tests/passes/analysis and end to end once.
pytestmark = pytest.mark.slow

aten = torch.ops.aten


# ---------------------------------------------------------------------------------------
# The assumption: decomposing each listed op only ever produces its listed ops.


class OneOp(nn.Module):
    def __init__(self, fn: Callable[..., torch.Tensor]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        return self.fn(*args)


class TwoOperands(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b) + 1


def _conv(fn: Callable[..., torch.Tensor], **kwargs: int) -> Callable[..., torch.Tensor]:
    return lambda x, w, b: fn(x, w, b, **kwargs)


def _r(*shape: int) -> torch.Tensor:
    return torch.randn(shape)


# (op, function, inputs); each op at least twice with different arguments, so "for any
# arguments" is exercised where the arguments could change the decomposition.
ONE_OP_CASES = [
    (aten.conv1d.default, _conv(F.conv1d), (_r(1, 4, 9), _r(6, 4, 3), _r(6))),
    (
        aten.conv1d.default,
        _conv(F.conv1d, stride=2, dilation=2, groups=2),
        (_r(1, 4, 9), _r(6, 2, 3), _r(6)),
    ),
    (aten.conv2d.default, _conv(F.conv2d), (_r(1, 4, 7, 7), _r(6, 4, 3, 3), _r(6))),
    (
        aten.conv2d.default,
        _conv(F.conv2d, padding=1, groups=4),
        (_r(1, 4, 7, 7), _r(4, 1, 3, 3), _r(4)),
    ),
    (aten.conv3d.default, _conv(F.conv3d), (_r(1, 2, 5, 5, 5), _r(3, 2, 2, 2, 2), _r(3))),
    (
        aten.conv3d.default,
        _conv(F.conv3d, stride=2, groups=2),
        (_r(1, 2, 5, 5, 5), _r(4, 1, 2, 2, 2), _r(4)),
    ),
    (aten.conv_transpose1d.default, _conv(F.conv_transpose1d), (_r(1, 4, 9), _r(4, 6, 3), _r(6))),
    (
        aten.conv_transpose1d.default,
        _conv(F.conv_transpose1d, stride=2, padding=1, groups=2),
        (_r(1, 4, 9), _r(4, 3, 4), _r(6)),
    ),
    (
        aten.conv_transpose2d.input,
        _conv(F.conv_transpose2d),
        (_r(1, 4, 5, 5), _r(4, 6, 3, 3), _r(6)),
    ),
    (
        aten.conv_transpose2d.input,
        _conv(F.conv_transpose2d, stride=2, output_padding=1),
        (_r(1, 4, 5, 5), _r(4, 3, 3, 3), _r(3)),
    ),
    (
        aten.conv_transpose3d.input,
        _conv(F.conv_transpose3d),
        (_r(1, 2, 3, 3, 3), _r(2, 3, 2, 2, 2), _r(3)),
    ),
    (
        aten.conv_transpose3d.input,
        _conv(F.conv_transpose3d, stride=2, groups=2),
        (_r(1, 2, 3, 3, 3), _r(2, 2, 2, 2, 2), _r(4)),
    ),
    (aten.transpose.int, lambda x: x.transpose(1, 2) + 1, (_r(2, 3, 4),)),
    (aten.transpose.int, lambda x: x.transpose(1, 1) + 1, (_r(2, 3, 4),)),
    (aten.t.default, lambda x: x.t() + 1, (_r(3, 4),)),
    (aten.t.default, lambda x: x.t() + 1, (_r(5),)),
    (aten._unsafe_view.default, lambda x: aten._unsafe_view(x, [6, 4]) + 1, (_r(2, 3, 4),)),
    (aten._unsafe_view.default, lambda x: aten._unsafe_view(x, [-1]) * 2, (_r(2, 3, 4),)),
    (
        aten.layer_norm.default,
        lambda x, w, b: F.layer_norm(x, (4,), w, b),
        (_r(2, 3, 4), _r(4), _r(4)),
    ),
    (aten.layer_norm.default, lambda x: F.layer_norm(x, (3, 4), eps=1e-3), (_r(2, 3, 4),)),
    (aten.softmax.int, lambda x: x.softmax(-1), (_r(2, 3, 4),)),
    (aten.softmax.int, lambda x: torch.softmax(x, 0, dtype=torch.float64), (_r(2, 3, 4),)),
    (aten.square.default, torch.square, (_r(2, 3),)),
    (aten.square.default, torch.square, (torch.arange(6).reshape(2, 3),)),
    (aten.clamp_min.default, lambda x: torch.clamp_min(x, 0.1), (_r(2, 3),)),
    (aten.clamp_min.default, lambda x: torch.clamp_min(x, 2), (torch.arange(6),)),
    (aten.squeeze.dim, lambda x: x.squeeze(1) + 1, (_r(3, 1, 4),)),
    (aten.squeeze.dim, lambda x: x.squeeze(0) + 1, (_r(3, 2),)),
    (aten.split.Tensor, lambda x: x.split(2, 1)[0] + 1, (_r(3, 5),)),
    (aten.split.Tensor, lambda x: x.split(3, 0)[1] + 1, (_r(6, 2),)),
    (aten.mv.default, lambda a, b: torch.mv(a, b) + 1, (_r(3, 4), _r(4))),
    (aten.mv.default, lambda a, b: torch.mv(a.t(), b) + 1, (_r(4, 3), _r(4))),
    (aten.dot.default, lambda a, b: torch.dot(a, b) + 1, (_r(4), _r(4))),
    (aten.dot.default, lambda a, b: torch.dot(a[::2], b) + 1, (_r(8), _r(4))),
    *(
        (
            aten.linalg_vector_norm.default,
            lambda x, o=o, d=d, t=t: torch.linalg.vector_norm(x, o, d, True, dtype=t) + 1,
            (_r(3, 4),),
        )
        for o in (2, 1, 0, 0.5, 3, float("inf"), float("-inf"))
        for d in (None, 1, (0, 1))
        for t in (None, torch.float64)
    ),
    (aten.silu.default, F.silu, (_r(2, 3),)),
    (aten.silu.default, F.silu, (_r(2, 3).half(),)),
    (aten.silu.default, F.silu, (_r(2, 3).bfloat16(),)),
    (
        aten.adaptive_avg_pool2d.default,
        lambda x: F.adaptive_avg_pool2d(x, 1) + 1,
        (_r(1, 3, 7, 7),),
    ),
    (
        aten.adaptive_avg_pool2d.default,
        lambda x: F.adaptive_avg_pool2d(x, (3, 3)) + 1,
        (_r(1, 3, 7, 7),),
    ),
    (
        aten.adaptive_avg_pool2d.default,
        lambda x: F.adaptive_avg_pool2d(x, (5, 3)) + 1,
        (_r(3, 7, 6),),
    ),
    (
        aten.adaptive_avg_pool2d.default,
        lambda x: F.adaptive_avg_pool2d(x, (1, 1)) + 1,
        (_r(1, 3, 7, 7).to(memory_format=torch.channels_last),),
    ),
    (aten.sum.default, lambda x: x.sum() + 1, (_r(3, 4),)),
    (aten.sum.default, lambda x: x.sum() + 1, (torch.arange(6),)),
    *(
        (aten.matmul.default, lambda a, b: torch.matmul(a, b) + 1, (a, b))
        for a, b in [
            (_r(4), _r(4)),
            (_r(4), _r(4, 5)),
            (_r(4), _r(2, 4, 5)),
            (_r(4), _r(2, 2, 4, 5)),
            (_r(3, 4), _r(4)),
            (_r(3, 4), _r(4, 5)),
            (_r(3, 4), _r(2, 4, 5)),
            (_r(2, 3, 4), _r(4)),
            (_r(2, 3, 4), _r(4, 5)),
            (_r(2, 3, 4), _r(2, 4, 5)),
            (_r(2, 3, 4), _r(2, 2, 4, 5)),
            (_r(2, 2, 3, 4), _r(4)),
            (_r(2, 2, 3, 4), _r(4, 5)),
            (_r(2, 1, 3, 4), _r(3, 4, 5)),
            (_r(1, 3, 4), _r(2, 4, 5)),
            # Non-contiguous activations take the expand + bmm path.
            (_r(2, 4, 3).transpose(1, 2), _r(4, 5)),
            (_r(2, 4, 3).transpose(1, 2), _r(4)),
            (_r(2, 2, 4, 3).transpose(-1, -2), _r(4, 5)),
        ]
    ),
]


# Dynamic sizes change which branch matmul takes (and add shape arithmetic).
DYNAMIC_MATMUL_CASES = [
    ((_r(2, 3, 4), _r(4, 5)), ({0: Dim("b", min=2, max=64)}, None)),
    ((_r(2, 3, 4), _r(2, 4, 5)), ({0: Dim("b", min=2, max=64)}, {0: Dim("b", min=2, max=64)})),
    ((_r(3, 4), _r(4)), ({0: Dim("n", min=2, max=64)}, None)),
    ((_r(4), _r(2, 4, 5)), (None, {0: Dim("b", min=2, max=64)})),
    ((_r(2, 2, 3, 4), _r(4, 5)), ({0: Dim("b", min=2, max=64), 2: Dim("l", min=2, max=64)}, None)),
]


def test_every_listed_op_has_cases() -> None:
    assert {case[0] for case in ONE_OP_CASES} == set(DECOMPOSES_ONLY_TO)


def _call_targets(ep: ExportedProgram) -> set[object]:
    return {n.target for n in ep.graph.nodes if n.op == "call_function"}


_SHAPE_ARITHMETIC = (aten.sym_size.int, aten.sym_numel.default, aten.sym_stride.int)


def _products(ep: ExportedProgram, op: torch._ops.OpOverload) -> set[object]:
    """The ops one decomposition step of ``op`` adds to ``ep`` (shape arithmetic aside)."""
    assert op in _call_targets(ep), "export no longer keeps this op until decomposition"
    before = _call_targets(ep) - {op}
    # Only this op's own entry: whatever it produces shows here, undecomposed.
    one_step = ep.run_decompositions({op: _default_decomposition_table()[op]})
    return {
        t
        for t in _call_targets(one_step) - before
        if isinstance(t, torch._ops.OpOverload) and t not in _SHAPE_ARITHMETIC
    }


# The full tier runs the first cases of each op (every op at least twice); the campaign
# tier the rest (norms and matmuls have dozens, a few seconds each).
FULL_TIER_CASES_PER_OP = 3


def _one_op_params() -> list[Any]:
    seen: dict[object, int] = {}
    params = []
    for i, case in enumerate(ONE_OP_CASES):
        seen[case[0]] = seen.get(case[0], 0) + 1
        kept = seen[case[0]] <= FULL_TIER_CASES_PER_OP
        params.append(pytest.param(*case, id=f"{case[0]}-{i}", marks=campaign_unless(kept)))
    return params


@pytest.mark.parametrize("op, fn, inputs", _one_op_params())
def test_listed_op_decomposes_only_to_its_listed_ops(op, fn, inputs) -> None:
    ep = torch.export.export(OneOp(fn), inputs).run_decompositions({})
    assert op in decomposed_ops()
    assert _products(ep, op) <= DECOMPOSES_ONLY_TO[op]


@pytest.mark.parametrize(
    "inputs, dynamic_shapes",
    DYNAMIC_MATMUL_CASES,
    ids=[f"case{i}" for i in range(len(DYNAMIC_MATMUL_CASES))],
)
def test_matmul_with_dynamic_sizes_decomposes_only_to_its_listed_ops(
    inputs, dynamic_shapes
) -> None:
    ep = torch.export.export(TwoOperands(), inputs, dynamic_shapes=dynamic_shapes)
    ep = ep.run_decompositions({})
    assert _products(ep, aten.matmul.default) <= DECOMPOSES_ONLY_TO[aten.matmul.default]


@pytest.mark.parametrize("op", list(DECOMPOSES_ONLY_TO), ids=str)
def test_listed_ops_are_closed_under_decomposition(op) -> None:
    """An op a listed op produces that the table rewrites again is listed too, and its
    own products are among the first op's."""
    for produced in DECOMPOSES_ONLY_TO[op]:
        if produced in decomposed_ops():
            assert produced in DECOMPOSES_ONLY_TO
            assert DECOMPOSES_ONLY_TO[produced] <= DECOMPOSES_ONLY_TO[op]


# ---------------------------------------------------------------------------------------
# When the partitioner returns no filter, and when it must keep it.


class WeightNormConvs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = weight_norm(nn.Conv1d(4, 8, 3, padding=1))
        self.b = weight_norm(nn.ConvTranspose1d(8, 4, 4, stride=2, padding=1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.tanh(self.a(x)))


class WithActivationMatmul(WeightNormConvs):
    """`matmul` decomposes to mm, bmm or mv depending on ranks; nothing kept is among them."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = super().forward(x)
        return y @ y.transpose(1, 2)


class SpectralWithActivationMatmul(nn.Module):
    """spectral_norm's fold keeps `mv`, which an activation `matmul` could decompose into."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = spectral_norm(nn.Linear(10, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.proj(x)
        return y @ y.transpose(1, 2)


class WithActivationVar(WeightNormConvs):
    """`var` is not listed."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = super().forward(x)
        return y / y.var(dim=1, keepdim=True)


class WithActivationLinear(WeightNormConvs):
    """A linear whose weight is an activation: the stock filter rejects it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = super().forward(x)
        return F.linear(y, y[0])


class WithCond(WeightNormConvs):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = super().forward(x)
        return torch.cond(y.sum() > 0, lambda t: t * 2, lambda t: t - 1, (y,))


def _aten_program(model: nn.Module, x: torch.Tensor) -> ExportedProgram:
    # What executorch hands ops_to_not_decompose: the exported program, functionalized.
    return torch.export.export(prepare_for_xnnpack(model.eval()), (x,)).run_decompositions({})


X = torch.randn(1, 4, 10)


def test_no_filter_with_an_activation_matmul() -> None:
    ep = _aten_program(WithActivationMatmul(), X)
    assert aten.matmul.default in _call_targets(ep)
    assert XnnpackFoldingPartitioner().ops_to_not_decompose(ep)[1] is None


def test_no_filter_for_weight_norm_convs() -> None:
    ops, filter_fn = XnnpackFoldingPartitioner().ops_to_not_decompose(
        _aten_program(WeightNormConvs(), X)
    )
    assert filter_fn is None
    assert aten._weight_norm.default in ops


def test_kept_nodes_are_marked_without_a_filter() -> None:
    ep = _aten_program(WeightNormConvs(), X)
    XnnpackFoldingPartitioner().ops_to_not_decompose(ep)
    kept = [n for n in ep.graph.nodes if n.target is aten._weight_norm.default]
    assert len(kept) == 2
    assert all(n.meta[CUSTOM_META_KEY][PRESERVED_META_KEY] for n in kept)


@pytest.mark.parametrize(
    "model",
    [SpectralWithActivationMatmul, WithActivationVar, WithActivationLinear, WithCond],
    ids=[
        "decomposed-op-could-create-kept-ops",
        "unlisted-decomposition",
        "kept-op-rejected",
        "control-flow",
    ],
)
def test_filter_kept_when_it_could_matter(model: type[nn.Module]) -> None:
    _, filter_fn = XnnpackFoldingPartitioner().ops_to_not_decompose(_aten_program(model(), X))
    assert callable(filter_fn)


def test_filter_is_redundant_changes_nothing() -> None:
    ep = _aten_program(WeightNormConvs(), X)
    code = ep.graph_module.code
    metas = [dict(n.meta) for n in ep.graph.nodes]
    assert filter_is_redundant(ep, [aten._weight_norm.default], lambda node: True)
    assert ep.graph_module.code == code
    assert [dict(n.meta) for n in ep.graph.nodes] == metas


def test_rejected_instance_refuses() -> None:
    ep = _aten_program(WeightNormConvs(), X)
    assert not filter_is_redundant(ep, [aten._weight_norm.default], lambda node: False)


def test_op_without_a_known_decomposition_refuses() -> None:
    ep = _aten_program(WithActivationVar(), X)
    assert aten.var.dim in _call_targets(ep)
    assert aten.var.dim in decomposed_ops()
    assert aten.var.dim not in DECOMPOSES_ONLY_TO
    assert not filter_is_redundant(ep, [aten._weight_norm.default], lambda node: True)


def test_listed_op_producing_a_kept_op_refuses() -> None:
    # A partitioner that keeps convolution itself: conv1d would create instances.
    ep = _aten_program(WeightNormConvs(), X)
    assert not filter_is_redundant(
        ep, [aten._weight_norm.default, aten.convolution.default], lambda node: True
    )


# ---------------------------------------------------------------------------------------
# The program is the one the filter path gives, byte for byte, and runs like eager.


def _lower_both(
    model_fn: Callable[[], nn.Module], inputs: tuple[torch.Tensor, ...], monkeypatch
) -> tuple[bytes, bytes, bool]:
    """The program lowered as shipped and with the filter kept, and whether the shortcut
    was taken as shipped (the first question executorch asks decides)."""

    def lower(**options: bool) -> bytes:
        ep = torch.export.export(prepare_for_xnnpack(model_fn().eval()), inputs)
        partitioner = XnnpackFoldingPartitioner(**options)
        return to_edge_transform_and_lower(ep, partitioner=[partitioner]).to_executorch().buffer

    taken: list[bool] = []
    real = aten_stage_module.filter_is_redundant

    def recording(*args: object) -> bool:
        taken.append(real(*args))
        return taken[-1]

    monkeypatch.setattr(aten_stage_module, "filter_is_redundant", recording)
    fast = lower()
    monkeypatch.setattr(aten_stage_module, "filter_is_redundant", real)
    filtered = lower(keep_decomposition_filter=True)
    return fast, filtered, bool(taken) and taken[0]


def test_escape_hatch_keeps_the_filter() -> None:
    partitioner = XnnpackFoldingPartitioner(keep_decomposition_filter=True)
    _, filter_fn = partitioner.ops_to_not_decompose(_aten_program(WeightNormConvs(), X))
    assert callable(filter_fn)


GRID = [
    (norm, layer)
    for norm in NORMS
    for layer in LAYERS
    if not (norm == "weight_norm_dim2" and layer == "linear")
]
# The full tier: every norm on a conv1d, and the first norm on a transposed conv and a
# linear too; the campaign tier the whole grid.
FULL_TIER_GRID = frozenset(
    [(norm, "conv1d") for norm in NORMS]
    + [(next(iter(NORMS)), layer) for layer in ("conv_transpose2d", "linear")]
)


@pytest.mark.runtime
@pytest.mark.parametrize(
    "norm, layer",
    [
        pytest.param(n, layer_name, marks=campaign_unless((n, layer_name) in FULL_TIER_GRID))
        for n, layer_name in GRID
    ],
    ids=[f"{n}-{layer_name}" for n, layer_name in GRID],
)
def test_same_program_as_filter_path_grid(norm: str, layer: str, monkeypatch) -> None:
    fixture = fixture_by_name(f"{norm}-{layer}")
    inputs = fixture.inputs()
    fast, filtered, taken = _lower_both(fixture.model, inputs, monkeypatch)
    assert taken, "every norm on every layer kind should lower without the filter"
    assert fast == filtered
    model = fixture.model()
    torch.testing.assert_close(run_pte(fast, inputs)[0], model(*inputs), rtol=1e-4, atol=1e-5)


FAST_FIXTURES = ("pos_conv_small", "wn_conv_stack", "spectral_mlp")


@pytest.mark.runtime
@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=campaign_unless(n in FAST_FIXTURES)) for n in FIXTURES],
)
def test_same_program_as_filter_path_fixtures(name: str, monkeypatch) -> None:
    fixture = FIXTURES[name]
    fast, filtered, taken = _lower_both(fixture.model, fixture.inputs(), monkeypatch)
    # Fixtures with activation matmuls, transposes or layer norms keep the filter; the
    # program must match either way.
    assert fast == filtered


def test_shortcut_is_taken_on_the_vocoder(monkeypatch) -> None:
    # The benchmark's HiFi-GAN fixture: the case the shortcut exists for.
    ep = torch.export.export(
        prepare_for_xnnpack(FIXTURES["hifigan_generator"].model()),
        FIXTURES["hifigan_generator"].inputs(),
    )
    _, filter_fn = XnnpackFoldingPartitioner().ops_to_not_decompose(ep.run_decompositions({}))
    assert filter_fn is None


def test_refuses_without_executorchs_private_helper(monkeypatch) -> None:
    import executorch.exir.program._program as program_module

    ep = _aten_program(WeightNormConvs(), X)
    from xnnfold import _upstream

    monkeypatch.delattr(program_module, "_remove_invalid_ops_for_not_decompose")
    # As on a release without it: the seam has not loaded it either.
    monkeypatch.delitem(vars(_upstream), "remove_invalid_ops_for_not_decompose", raising=False)
    assert not filter_is_redundant(ep, [aten._weight_norm.default], lambda node: True)
