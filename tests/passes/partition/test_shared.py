"""Sources shared between GEMM weights: packed projections, modules called twice, methods.

Each folded slice or call is stored once in total: the .pte is never larger than the
program with the same weights folded by hand (or, where hand-folding leaves GEMMs on
portable, than the stock program), and every output matches eager through the runtime.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional

import pytest
import torch
import torch.nn.functional as F
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import ExecutorchProgramManager, to_edge_transform_and_lower
from torch import nn
from torch.fx.passes.infra.partitioner import Partition
from torch.nn.utils import parametrize
from torch.nn.utils.parametrizations import weight_norm

import xnnfold
from xnnfold.passes.partition._grouping import acyclic_grouping, contracted_acyclic

from tests._lowering import lower_folding, lower_stock
from tests.support.packed_sources import PackedWithDeclinedReader

# The full tier: the fast tier covers each rule in tests/passes/analysis and end to end once.
pytestmark = [pytest.mark.runtime, pytest.mark.slow]


class CrossAttention(nn.Module):
    """nn.MultiheadAttention with distinct query and key/value inputs: its packed
    in_proj weight and bias are split into q and kv slices, one GEMM each."""

    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(32, 4, batch_first=True)

    def forward(self, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        return self.attn(q, kv, kv, need_weights=False)[0]


class PackedWeightNorm(nn.Module):
    """One weight_norm'd packed projection chunked into three GEMM weights."""

    def __init__(self) -> None:
        super().__init__()
        self.packed = weight_norm(nn.Linear(32, 96))

    def forward(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        wa, wb, wc = self.packed.weight.chunk(3)
        ba, bb, bc = self.packed.bias.chunk(3)
        return F.linear(a, wa, ba) + F.linear(b, wb, bb) * F.linear(c, wc, bc)


class CalledTwice(nn.Module):
    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(torch.tanh(self.layer(x)))


class StaticAndScaled(nn.Module):
    """One weight read directly by a GEMM and, scaled, by another: folding the scaled
    copy frees nothing, so it would only add bytes."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(16, 16))
        self.scale = nn.Parameter(torch.tensor(0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight) + F.linear(x, self.weight * self.scale)


def _seeded(build: Callable[[], nn.Module]) -> nn.Module:
    torch.manual_seed(0)
    return build().eval()


def _twice_conv2d() -> nn.Module:
    return CalledTwice(weight_norm(nn.Conv2d(8, 8, 3, padding=1)))


def _twice_linear() -> nn.Module:
    return CalledTwice(weight_norm(nn.Linear(24, 24)))


def _hand_folded(model: nn.Module) -> nn.Module:
    for module in model.modules():
        if parametrize.is_parametrized(module):
            for name in list(module.parametrizations.keys()):
                parametrize.remove_parametrizations(module, name)
    return model


def _inputs(*shapes: tuple[int, ...]) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(1)
    return tuple(torch.randn(*s, generator=generator) for s in shapes)


CROSS_INPUTS = ((1, 5, 32), (1, 7, 32))
PACKED_INPUTS = ((3, 32), (3, 32), (3, 32))


@functools.cache
def _lowered(name: str) -> tuple[Any, Any]:
    if name == "cross":
        inputs = _inputs(*CROSS_INPUTS)
        return lower_folding(_seeded(CrossAttention), inputs), lower_stock(
            _seeded(CrossAttention), inputs
        )
    inputs = _inputs(*PACKED_INPUTS)
    return lower_folding(_seeded(PackedWeightNorm), inputs), lower_stock(
        _hand_folded(_seeded(PackedWeightNorm)), inputs
    )


@pytest.mark.parametrize("name", ["cross", "packed"])
def test_each_slice_of_a_packed_source_is_folded(name: str) -> None:
    folded, _ = _lowered(name)
    report = xnnfold.explain(folded.edge)
    assert not report.outside, report.table()
    # linear, or the addmm it decomposes to: either way the GEMM with a packed slice.
    linears = [r for r in report.rows if r.op in ("linear", "addmm") and r.computed]
    assert len(linears) >= 2
    assert all(r.folded == ("weight", "bias") for r in linears), report.table()


@pytest.mark.parametrize("name", ["cross", "packed"])
def test_packed_source_folded_matches_eager(name: str) -> None:
    folded, _ = _lowered(name)
    build, shapes = (
        (CrossAttention, CROSS_INPUTS) if name == "cross" else (PackedWeightNorm, PACKED_INPUTS)
    )
    inputs = _inputs(*shapes)
    expected = _seeded(build)(*inputs)
    (out,) = xnnfold.run_pte(folded.buffer, inputs)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["cross", "packed"])
def test_packed_source_is_stored_once(name: str) -> None:
    # The reference keeps the packed source once (stock leaves the sliced GEMMs on
    # portable): folding each slice must not add a copy of the source per GEMM.
    folded, reference = _lowered(name)
    assert reference.summary.outside_ops, "the reference should leave GEMMs on portable"
    assert len(folded.buffer) <= len(reference.buffer)


def test_cross_attention_delegates_are_acyclic_even_though_stock_grouping_is_not() -> None:
    # The stock GroupBasedPartitioner merges the q/kv group with a permute of q and a
    # clone of kv's projection into partitions that depend on each other; the
    # partitioner must notice and group again.
    folded, _ = _lowered("cross")
    ep = folded.edge.exported_program()
    delegates = [n for n in ep.graph.nodes if "call_delegate" in str(n.target)]
    assert len(delegates) >= 2


@pytest.mark.parametrize("build", [_twice_conv2d, _twice_linear], ids=["conv2d", "linear"])
def test_module_called_twice_stores_its_folded_weight_once(
    build: Callable[[], nn.Module],
) -> None:
    shape = (1, 8, 6, 6) if build is _twice_conv2d else (2, 24)
    inputs = _inputs(shape)
    folded = lower_folding(_seeded(build), inputs)
    hand = lower_stock(_hand_folded(_seeded(build)), inputs)
    assert not xnnfold.explain(folded.edge).outside
    assert len(folded.buffer) <= len(hand.buffer)
    (out,) = xnnfold.run_pte(folded.buffer, inputs)
    torch.testing.assert_close(out, _seeded(build)(*inputs), rtol=1e-5, atol=1e-5)


def test_conv1d_called_twice_lowers_and_matches_eager() -> None:
    # Stock XNNPACK cannot lower a hand-folded Conv1d called twice (its Conv1dUnsqueeze
    # pass reshapes the one shared weight twice); each folded call gets a constant.
    def build() -> nn.Module:
        return CalledTwice(weight_norm(nn.Conv1d(8, 8, 3, padding=1)))

    inputs = _inputs((1, 8, 12))
    folded = lower_folding(_seeded(build), inputs)
    assert folded.summary.fully_delegated
    (out,) = xnnfold.run_pte(folded.buffer, inputs)
    torch.testing.assert_close(out, _seeded(build)(*inputs), rtol=1e-5, atol=1e-5)


class _Encode(nn.Module):
    def __init__(self, conv: nn.Module) -> None:
        super().__init__()
        self.conv = conv

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x))


class _Decode(_Encode):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x) * 2.0


def _two_methods(conv: nn.Module, *, fold: bool) -> ExecutorchProgramManager:
    inputs = _inputs((1, 8, 6, 6))
    methods = {"encode": _Encode(conv).eval(), "decode": _Decode(conv).eval()}
    if fold:
        methods = {k: xnnfold.prepare_for_xnnpack(m) for k, m in methods.items()}
    programs = {k: torch.export.export(m, inputs) for k, m in methods.items()}
    partitioner = xnnfold.XnnpackFoldingPartitioner() if fold else XnnpackPartitioner()
    return to_edge_transform_and_lower(programs, partitioner=[partitioner]).to_executorch()


def _shared_conv() -> nn.Module:
    torch.manual_seed(0)
    return weight_norm(nn.Conv2d(8, 8, 3, padding=1)).eval()


def test_two_methods_share_one_folded_weight() -> None:
    folded = _two_methods(_shared_conv(), fold=True)
    hand = _two_methods(_hand_folded(_shared_conv()), fold=False)
    report = xnnfold.explain(folded)
    assert {r.method for r in report.folded} == {"encode", "decode"}
    assert len(folded.buffer) <= len(hand.buffer)


@pytest.mark.parametrize("method", ["encode", "decode"])
def test_two_methods_match_eager(method: str) -> None:
    folded = _two_methods(_shared_conv(), fold=True)
    inputs = _inputs((1, 8, 6, 6))
    module = {"encode": _Encode, "decode": _Decode}[method](_shared_conv()).eval()
    (out,) = xnnfold.run_pte(folded.buffer, inputs, method)
    torch.testing.assert_close(out, module(*inputs), rtol=1e-5, atol=1e-5)


def test_source_that_is_also_a_stored_weight_is_not_folded() -> None:
    inputs = _inputs((4, 16))
    folded = lower_folding(_seeded(StaticAndScaled), inputs)
    stock = lower_stock(_seeded(StaticAndScaled), inputs)
    report = xnnfold.explain(folded.edge)
    assert not report.folded, report.table()
    # Linear takes a weight computed at run time, so the GEMM is still delegated, and
    # the report says why its weight was not folded.
    (scaled,) = [r for r in report.rows if r.reason]
    assert scaled.delegated and "stored weight" in scaled.reason
    assert len(folded.buffer) <= len(stock.buffer)
    (out,) = xnnfold.run_pte(folded.buffer, inputs)
    torch.testing.assert_close(out, _seeded(StaticAndScaled)(*inputs), rtol=1e-5, atol=1e-5)


def _diamond() -> tuple[torch.fx.Graph, dict[str, torch.fx.Node]]:
    # a -> b -> c and a -> d -> c: {a, c} depends on itself through b or d.
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    a = graph.call_function(torch.relu, (x,))
    b = graph.call_function(torch.tanh, (a,))
    c = graph.call_function(torch.add, (a, b))
    graph.output(c)
    return graph, {"a": a, "b": b, "c": c}


def test_contracted_graph_check_sees_a_cycle_through_an_outside_node() -> None:
    graph, n = _diamond()
    assert not contracted_acyclic(graph, [[n["a"], n["c"]]])
    assert contracted_acyclic(graph, [[n["a"]], [n["c"]]])
    assert contracted_acyclic(graph, [[n["a"], n["b"], n["c"]]])


def test_grouping_never_merges_into_a_cycle() -> None:
    graph, n = _diamond()
    partitions = acyclic_grouping(graph, [[n["a"]], [n["c"]]])
    assert all(isinstance(p, Partition) for p in partitions)
    assert len(partitions) == 2
    assert contracted_acyclic(graph, [list(p.nodes) for p in partitions])


def test_grouping_rejects_a_group_that_is_itself_cyclic() -> None:
    graph, n = _diamond()
    with pytest.raises(RuntimeError, match="depend on each other"):
        acyclic_grouping(graph, [[n["a"], n["c"]]])


class _Table(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(1024, 64)
        self.bias = nn.Parameter(torch.randn(1024))


class _Lookup(nn.Module):
    def __init__(self, table: _Table) -> None:
        super().__init__()
        self.table = table

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.table.emb(ids) + self.table.bias[:64]


class _TiedLogits(_Lookup):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.table.emb.weight.t() + self.table.bias * 0.5


_METHOD_INPUTS = {
    "embed": (torch.randint(0, 1024, (1, 5), generator=torch.Generator().manual_seed(1)),),
    "logits": _inputs((2, 64)),
}


def _tied_program(
    partitioners: str, table: Optional[_Table] = None
) -> tuple[ExecutorchProgramManager, Any]:
    table = table or _Table().eval()
    modules = {"embed": _Lookup(table).eval(), "logits": _TiedLogits(table).eval()}
    programs = {k: torch.export.export(m, _METHOD_INPUTS[k]) for k, m in modules.items()}
    partitioner: Any
    if partitioners == "stock":
        partitioner = [XnnpackPartitioner()]
    elif partitioners == "one":
        partitioner = [xnnfold.XnnpackFoldingPartitioner()]
    else:  # one instance per method: they share what they learn through the tensors
        partitioner = {k: [xnnfold.XnnpackFoldingPartitioner()] for k in programs}
    edge = to_edge_transform_and_lower(programs, partitioner=partitioner)
    return edge.to_executorch(), (edge, modules)


@pytest.mark.parametrize("partitioners", ["one", "per_method"])
def test_a_source_another_method_stores_is_not_folded(partitioners: str) -> None:
    folded, (edge, _) = _tied_program(partitioners)
    stock, _ = _tied_program("stock")
    assert len(folded.buffer) <= len(stock.buffer)
    (mm,) = [r for r in xnnfold.explain(edge).rows if r.op == "mm"]
    # Still delegated, with its weight computed at run time.
    assert mm.delegated and mm.folded == ()
    assert "another method" in (mm.reason or "")


@pytest.mark.parametrize("method", ["embed", "logits"])
def test_methods_sharing_a_table_match_eager(method: str) -> None:
    folded, (_, modules) = _tied_program("one")
    (out,) = xnnfold.run_pte(folded.buffer, _METHOD_INPUTS[method], method)
    torch.testing.assert_close(out, modules[method](*_METHOD_INPUTS[method]), rtol=1e-5, atol=1e-5)


def test_facts_of_one_lowering_do_not_decline_the_next() -> None:
    """After a program whose `embed` method stores the table, lowering `logits` alone
    (the same tensors) folds the transposed table again: nothing else stores it."""
    table = _Table().eval()
    _tied_program("one", table)
    logits = _TiedLogits(table).eval()
    ep = torch.export.export(logits, _METHOD_INPUTS["logits"])
    edge = to_edge_transform_and_lower(ep, partitioner=[xnnfold.XnnpackFoldingPartitioner()])
    (mm,) = [r for r in xnnfold.explain(edge).rows if r.op == "mm"]
    assert mm.folded == ("weight",), mm


def test_a_source_shared_with_a_declined_gemm_lowers_and_matches_eager() -> None:
    model = PackedWithDeclinedReader().eval()
    inputs = _inputs((3, 16))
    folded = lower_folding(model, inputs)
    stock = lower_stock(PackedWithDeclinedReader().eval(), inputs)
    (out,) = xnnfold.run_pte(folded.buffer, inputs)
    torch.testing.assert_close(out, model(*inputs), rtol=1e-5, atol=1e-5)
    rows = {r.op: r for r in xnnfold.explain(folded.edge).rows}
    assert not rows["addmm"].delegated
    # The packed source stays in the program for the addmm, so the linear is not
    # folded (that would store the slice twice); it still runs in the delegate.
    assert rows["mm"].delegated and rows["mm"].folded == ()
    assert len(folded.buffer) <= len(stock.buffer) + 1024


class _Packed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.w = nn.Parameter(torch.randn(16 * 8))
        self.b = nn.Parameter(torch.randn(8))


class _ScaledStackBias(nn.Module):
    """addmm with beta, its bias computed by `stack` (kept undecomposed to fold)."""

    def __init__(self, packed: _Packed) -> None:
        super().__init__()
        self.packed = packed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = self.packed
        return torch.addmm(torch.stack([p.b]), x, p.w.reshape(16, 8), beta=0.5)


class _ReadsPacked(_ScaledStackBias):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(self.packed.w).mean()


def test_a_later_method_storing_a_source_does_not_strand_kept_ops() -> None:
    """Found by the differential campaign: `forward`'s ops were kept undecomposed before
    `other` showed that it stores the weight's source; the addmm must still fold."""
    packed = _Packed().eval()
    modules = {"forward": _ScaledStackBias(packed).eval(), "other": _ReadsPacked(packed).eval()}
    inputs = {"forward": _inputs((3, 16)), "other": _inputs((3, 16))}
    programs = {k: torch.export.export(m, inputs[k]) for k, m in modules.items()}
    edge = to_edge_transform_and_lower(programs, partitioner=[xnnfold.XnnpackFoldingPartitioner()])
    buffer = edge.to_executorch().buffer
    for name, module in modules.items():
        (out,) = xnnfold.run_pte(buffer, inputs[name], name)
        torch.testing.assert_close(out, module(*inputs[name]), rtol=1e-5, atol=1e-5)


class _DeclinedSlice(nn.Module):
    """An addmm XNNPACK cannot compute (its bias is per row) on one half of a packed
    source: it stays on portable, and the whole source with it."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.w = nn.Parameter(torch.randn(2 * 64 * 256))
        self.row_bias = nn.Parameter(torch.randn(3, 256))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.addmm(self.row_bias, x, self.w[: 64 * 256].reshape(64, 256))


class _ResidualSlice(_DeclinedSlice):
    """An addmm whose bias is an activation (a residual), on one half of the source: its
    weight is not folded either."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.addmm(x.repeat(1, 4), x, self.w[: 64 * 256].reshape(64, 256))


class _WrittenBiasSlice(_DeclinedSlice):
    """An addmm whose bias is computed from a buffer the method updates (a run-time
    value), on one half of the source: it stays on portable, its weight's sources with it."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("count", torch.zeros(256))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.count.add_(1.0)
        return torch.addmm(self.count, x, self.w[: 64 * 256].reshape(64, 256))


class _FoldableSlice(nn.Module):
    """An mm on the other half: foldable, unless the first half's GEMM keeps the source."""

    def __init__(self, packed: _DeclinedSlice) -> None:
        super().__init__()
        self.packed = packed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.packed.w[64 * 256 :].reshape(64, 256)


def _declined_slice_program(
    partitioner: Any, order: tuple[str, ...], declined: type[_DeclinedSlice] = _DeclinedSlice
) -> tuple[bytes, Any, dict[str, nn.Module]]:
    packed = declined().eval()
    modules: dict[str, nn.Module] = {"declined": packed, "foldable": _FoldableSlice(packed).eval()}
    modules = {k: modules[k] for k in order}
    programs = {k: torch.export.export(m, _inputs((3, 64))) for k, m in modules.items()}
    edge = to_edge_transform_and_lower(programs, partitioner=[partitioner])
    return edge.to_executorch().buffer, edge, modules


_DECLINED = [_DeclinedSlice, _ResidualSlice, _WrittenBiasSlice]
_DECLINED_IDS = ["row_bias", "residual", "written_bias"]


@pytest.mark.parametrize("declined", _DECLINED, ids=_DECLINED_IDS)
@pytest.mark.parametrize("order", [("declined", "foldable"), ("foldable", "declined")])
def test_a_source_a_declined_gemm_keeps_is_not_folded_by_another_method(
    order: tuple[str, ...], declined: type[_DeclinedSlice]
) -> None:
    """Found by the differential campaign (seed 3, program 115): the other method folded
    its half of a source the declined addmm keeps, and the program stored that half
    twice (64 KiB here). The mm is still delegated, its weight computed at run time,
    which costs only the delegate's own bytes."""
    buffer, edge, _ = _declined_slice_program(xnnfold.XnnpackFoldingPartitioner(), order, declined)
    stock, _, _ = _declined_slice_program(XnnpackPartitioner(), order, declined)
    assert len(buffer) <= len(stock) + 1024, (len(buffer), len(stock))
    (mm,) = [r for r in xnnfold.explain(edge).rows if r.method == "foldable"]
    assert mm.delegated and mm.folded == (), mm


# Not `_WrittenBiasSlice`: executorch serializes a buffer its program writes without its
# initial value, so that method's first output is not eager's.
@pytest.mark.parametrize("declined", _DECLINED[:2], ids=_DECLINED_IDS[:2])
def test_methods_beside_a_declined_gemm_match_eager(declined: type[_DeclinedSlice]) -> None:
    buffer, _, modules = _declined_slice_program(
        xnnfold.XnnpackFoldingPartitioner(), ("declined", "foldable"), declined
    )
    inputs = _inputs((3, 64))
    for name, module in modules.items():
        (out,) = xnnfold.run_pte(buffer, inputs, name)
        torch.testing.assert_close(out, module(*inputs), rtol=1e-5, atol=1e-5)


def test_one_partitioner_lowering_twice_keeps_no_facts_of_the_first() -> None:
    """The same instance lowers the tied program, then `logits` alone: nothing stores the
    table in the second lowering, so its transposed table folds."""
    table = _Table().eval()
    partitioner = xnnfold.XnnpackFoldingPartitioner()
    modules = {"embed": _Lookup(table).eval(), "logits": _TiedLogits(table).eval()}
    programs = {k: torch.export.export(m, _METHOD_INPUTS[k]) for k, m in modules.items()}
    to_edge_transform_and_lower(programs, partitioner=[partitioner]).to_executorch()
    ep = torch.export.export(modules["logits"], _METHOD_INPUTS["logits"])
    edge = to_edge_transform_and_lower(ep, partitioner=[partitioner])
    (mm,) = [r for r in xnnfold.explain(edge).rows if r.op == "mm"]
    assert mm.folded == ("weight",), mm


class _RunTimeLinear(nn.Module):
    """A linear on one half of a packed source; with
    ``force_non_static_weights_for_f32_linear`` its weight is computed at run time."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.w = nn.Parameter(torch.randn(2 * 64 * 256))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.w[: 64 * 256].reshape(256, 64) * 2.0)


class _ConvOnOtherHalf(nn.Module):
    def __init__(self, packed: _RunTimeLinear) -> None:
        super().__init__()
        self.packed = packed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv1d(x, self.packed.w[64 * 256 :].reshape(256, 64, 1) * 2.0)


def _run_time_linear_program(partitioner: Any) -> tuple[bytes, Any, dict[str, nn.Module]]:
    packed = _RunTimeLinear().eval()
    modules: dict[str, nn.Module] = {"linear": packed, "conv": _ConvOnOtherHalf(packed).eval()}
    inputs = {"linear": _inputs((3, 64)), "conv": _inputs((1, 64, 5))}
    programs = {k: torch.export.export(m, inputs[k]) for k, m in modules.items()}
    edge = to_edge_transform_and_lower(programs, partitioner=[partitioner])
    return edge.to_executorch().buffer, edge, modules


def test_a_source_a_run_time_weight_keeps_is_not_folded_without_growth() -> None:
    """With ``force_non_static_weights_for_f32_linear`` the linear computes its weight at
    run time, so the packed source stays; folding the conv's half would store it twice."""
    buffer, edge, _ = _run_time_linear_program(
        xnnfold.XnnpackFoldingPartitioner(
            force_non_static_weights_for_f32_linear=True, growth_budget=xnnfold.NO_GROWTH
        )
    )
    stock, _, _ = _run_time_linear_program(
        XnnpackPartitioner(force_non_static_weights_for_f32_linear=True)
    )
    assert len(buffer) <= len(stock) + 2 * 1024, (len(buffer), len(stock))
    (conv,) = [r for r in xnnfold.explain(edge).rows if r.method == "conv"]
    assert conv.folded == () and conv.code == "XNF516", conv


def test_a_source_a_run_time_weight_keeps_counts_as_growth_when_folded() -> None:
    """The conv has no run-time-weight form, so the default budget folds its half: the
    program grows by what `explain` reports (the half stored twice), no more."""
    buffer, edge, modules = _run_time_linear_program(
        xnnfold.XnnpackFoldingPartitioner(force_non_static_weights_for_f32_linear=True)
    )
    stock, _, _ = _run_time_linear_program(
        XnnpackPartitioner(force_non_static_weights_for_f32_linear=True)
    )
    (conv,) = [r for r in xnnfold.explain(edge).rows if r.method == "conv"]
    assert conv.delegated and conv.folded == ("weight",), conv
    half = 64 * 256 * 4
    assert half - 64 <= conv.growth <= half, conv
    assert len(buffer) <= len(stock) + conv.growth + 1024, (len(buffer), len(stock))
    inputs = {"linear": _inputs((3, 64)), "conv": _inputs((1, 64, 5))}
    for name, module in modules.items():
        (out,) = xnnfold.run_pte(buffer, inputs[name], name)
        torch.testing.assert_close(out, module(*inputs[name]), rtol=1e-5, atol=1e-5)


class _HeldSource(nn.Module):
    """One method of a packed source: a linear that must fold its slice (through
    `_weight_norm`, kept undecomposed), so its partition holds the whole source, and an
    mm on another slice that alone would take its weight at run time."""

    def __init__(self, packed: _DeclinedSlice) -> None:
        super().__init__()
        self.packed = packed
        self.g = nn.Parameter(torch.rand(16, 1) + 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.packed.w
        held = F.linear(x, torch._weight_norm(w[: 64 * 16].reshape(16, 64), self.g, 0))
        return held + x @ (w[64 * 16 : 2 * 64 * 16].reshape(64, 16) * 2.0)


def _held_source_program(partitioner: Any) -> tuple[bytes, Any, dict[str, nn.Module]]:
    packed = _DeclinedSlice().eval()
    # `held` first: its plan keeps `_weight_norm` before `declined` shows it stores the source.
    modules: dict[str, nn.Module] = {"held": _HeldSource(packed).eval(), "declined": packed}
    programs = {k: torch.export.export(m, _inputs((3, 64))) for k, m in modules.items()}
    edge = to_edge_transform_and_lower(programs, partitioner=[partitioner])
    return edge.to_executorch().buffer, edge, modules


def test_a_gemm_whose_sources_another_partition_holds_folds() -> None:
    """Found by the differential campaign (seed 7, program 143): `declined` stores the
    source, so the mm alone would take its weight at run time; but the addmm's partition
    holds the source, and executorch would give the mm's delegate a copy of all of it
    (128 KiB here). The mm folds instead: the program holds the two folded slices
    (4 KiB each) beyond stock."""
    buffer, edge, _ = _held_source_program(xnnfold.XnnpackFoldingPartitioner())
    stock, _, _ = _held_source_program(XnnpackPartitioner())
    folded_slices = 2 * 64 * 16 * 4
    assert len(buffer) <= len(stock) + folded_slices + 2048, (len(buffer), len(stock))
    (mm,) = [r for r in xnnfold.explain(edge).rows if r.method == "held" and r.op == "mm"]
    assert mm.delegated and mm.folded == ("weight",), mm


def test_a_gemm_whose_sources_another_partition_holds_matches_eager() -> None:
    buffer, _, modules = _held_source_program(xnnfold.XnnpackFoldingPartitioner())
    inputs = _inputs((3, 64))
    for name, module in modules.items():
        (out,) = xnnfold.run_pte(buffer, inputs, name)
        torch.testing.assert_close(out, module(*inputs), rtol=1e-5, atol=1e-5)


def test_a_marked_fold_beside_a_run_time_weight_in_its_delegate_lowers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without the step above (as for an mm whose folded weight would outgrow the
    copies), the mm takes its weight at run time inside the linear's delegate, where it
    reads the source unfolded. There the linear's marked fold looks shared ("also used
    by ..., which is not a GEMM weight"), but it is correct: it folds, and the source
    stays for the mm."""
    from xnnfold.passes.partition import _matching

    monkeypatch.setattr(_matching, "copied_sources_gemms", lambda ep, matching: frozenset())
    buffer, edge, modules = _held_source_program(xnnfold.XnnpackFoldingPartitioner())
    rows = {r.op: r for r in xnnfold.explain(edge).rows if r.method == "held"}
    assert rows["linear"].folded == ("weight",) and rows["mm"].folded == (), rows
    inputs = _inputs((3, 64))
    for name, module in modules.items():
        (out,) = xnnfold.run_pte(buffer, inputs, name)
        torch.testing.assert_close(out, module(*inputs), rtol=1e-5, atol=1e-5)
