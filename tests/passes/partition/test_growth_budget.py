"""The growth budget end to end: broadcast convolution kernels fold within it, stay on the
portable kernels beyond it, and every program matches eager through the runtime.

A convolution has no run-time-weight form in XNNPACK, so a weight computed as one small
kernel broadcast to every group (``expand``, ``repeat``, ``tile``) either folds, growing
the program, or keeps the convolution on portable. Each case here knows the bytes its fold
adds and sets the budget exactly at them (folds) or one byte below (XNF516).
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import EdgeProgramManager, to_edge_transform_and_lower
from torch import nn
from torch.nn import functional as F

import xnnfold
from xnnfold import GrowthBudget, NO_GROWTH, XnnpackFoldingPartitioner
from xnnfold.fixtures import FIXTURES

pytestmark = pytest.mark.runtime

_FLOAT = 4


class _Broadcast(nn.Module):
    """A grouped convolution (``groups`` of ``channels``) whose weight is one kernel of
    one group broadcast to every output channel by ``how``."""

    def __init__(
        self, *, how: str, dims: int, transposed: bool, channels: int = 16, groups: int = 16
    ) -> None:
        super().__init__()
        self.how, self.dims, self.transposed = how, dims, transposed
        self.channels, self.groups = channels, groups
        self.kernel = nn.Parameter(torch.randn(1, channels // groups, *(3,) * dims))

    def weight(self) -> torch.Tensor:
        ones = (1,) * (self.dims + 1)
        if self.how == "expand":
            return self.kernel.expand(self.channels, *self.kernel.shape[1:])
        if self.how == "repeat":
            return self.kernel.repeat(self.channels, *ones)
        return self.kernel.tile((self.channels, *ones))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        name = ("conv_transpose" if self.transposed else "conv") + f"{self.dims}d"
        conv = getattr(F, name)
        return conv(x, self.weight(), groups=self.groups, padding=1)  # type: ignore[no-any-return]

    def added_bytes(self) -> int:
        return (self.channels - 1) * self.kernel.numel() * _FLOAT

    def inputs(self) -> tuple[torch.Tensor, ...]:
        generator = torch.Generator().manual_seed(0)
        return (torch.randn(1, self.channels, *(10,) * self.dims, generator=generator),)


def _budget(max_fold_bytes: int) -> GrowthBudget:
    # No relative cap: the program cap is then max_fold_bytes (never less than one fold).
    return GrowthBudget(max_fold_bytes=max_fold_bytes, max_program_fraction=0.0)


def _lower(model: nn.Module, inputs: tuple[Any, ...], budget: GrowthBudget) -> EdgeProgramManager:
    partitioner = XnnpackFoldingPartitioner(growth_budget=budget)
    return xnnfold.lower(model, inputs, partitioner=partitioner)


def _assert_matches_eager(
    edge: EdgeProgramManager, model: nn.Module, inputs: tuple[Any, ...], method: str = "forward"
) -> None:
    outputs = xnnfold.run_pte(edge.to_executorch().buffer, inputs, method)
    expected = model(*inputs)
    expected = expected if isinstance(expected, tuple) else (expected,)
    for out, ref in zip(outputs, expected):
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


def _check(model: _Broadcast, *, within: bool) -> xnnfold.ExplainReport:
    added = model.added_bytes()
    edge = _lower(model, model.inputs(), _budget(added if within else added - 1))
    report = xnnfold.explain(edge)
    (row,) = report.rows
    assert row.growth == added, report.table()
    if within:
        assert row.delegated and row.folded == ("weight",), report.table()
        assert report.growth == added
    else:
        assert not row.delegated and row.code == "XNF516", report.table()
        assert f"grow the program by {added} bytes" in (row.reason or "")
        assert "growth_budget" in (row.reason or "")
    _assert_matches_eager(edge, model.eval(), model.inputs())
    return report


def test_a_depthwise_expanded_kernel_folds_within_the_budget() -> None:
    _check(_Broadcast(how="expand", dims=1, transposed=False), within=True)


def test_a_depthwise_expanded_kernel_stays_on_portable_beyond_the_budget() -> None:
    _check(_Broadcast(how="expand", dims=1, transposed=False), within=False)


@pytest.mark.slow
def test_the_budget_reaches_the_fold_pass_on_the_mark() -> None:
    """The fold pass re-checks with the options the partitioner decided with."""
    from executorch.exir.lowered_backend_module import get_lowered_submodules

    from xnnfold.passes._marks import fold_mark_of

    model = _Broadcast(how="expand", dims=1, transposed=False)
    budget = _budget(model.added_bytes())
    edge = _lower(model, model.inputs(), budget)
    ((_, lowered, _),) = get_lowered_submodules(edge.exported_program().graph_module)
    marks = [fold_mark_of(n) for n in lowered.original_module.graph.nodes]
    assert [m.options.growth_budget for m in marks if m is not None] == [budget]


@pytest.mark.slow
@pytest.mark.parametrize("within", [True, False], ids=["within", "beyond"])
@pytest.mark.parametrize("groups", [16, 2], ids=["depthwise", "grouped"])
@pytest.mark.parametrize("transposed", [False, True], ids=["conv", "transposed"])
@pytest.mark.parametrize("dims", [1, 2], ids=["1d", "2d"])
@pytest.mark.parametrize("how", ["expand", "repeat", "tile"])
def test_a_broadcast_kernel_folds_exactly_within_the_budget(
    how: str, dims: int, transposed: bool, groups: int, within: bool
) -> None:
    torch.manual_seed(0)
    model = _Broadcast(how=how, dims=dims, transposed=transposed, groups=groups)
    _check(model, within=within)


class _SharedKernel(nn.Module):
    """One 3-tap kernel expanded for three depthwise convolutions of 8, 16 and 24
    channels: one group of folds, which together add (48 - 1) * 12 bytes."""

    def __init__(self) -> None:
        super().__init__()
        self.kernel = nn.Parameter(torch.randn(1, 1, 3))

    def forward(self, *xs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(
            F.conv1d(x, self.kernel.expand(x.shape[1], 1, 3), groups=x.shape[1], padding=1)
            for x in xs
        )


_SHARED_ADDED = (8 + 16 + 24 - 1) * 3 * _FLOAT
_SHARED_INPUTS = tuple(torch.randn(1, c, 10) for c in (8, 16, 24))


@pytest.mark.slow
@pytest.mark.parametrize("within", [True, False], ids=["within", "beyond"])
def test_folds_of_a_shared_source_are_counted_together(within: bool) -> None:
    """Each fold alone adds at most 284 bytes; together 564, which the budget must cover."""
    torch.manual_seed(0)
    model = _SharedKernel().eval()
    edge = _lower(model, _SHARED_INPUTS, _budget(_SHARED_ADDED if within else _SHARED_ADDED - 1))
    report = xnnfold.explain(edge)
    assert [r.growth for r in report.rows] == [_SHARED_ADDED] * 3, report.table()
    assert len({r.growth_group for r in report.rows}) == 1
    if within:
        assert all(r.folded == ("weight",) for r in report.rows), report.table()
        assert report.growth == _SHARED_ADDED
    else:
        assert [r.code for r in report.rows] == ["XNF516"] * 3, report.table()
    _assert_matches_eager(edge, model, _SHARED_INPUTS)


class _TwoBroadcasts(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = _Broadcast(how="expand", dims=1, transposed=False)
        self.second = _Broadcast(how="repeat", dims=1, transposed=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(torch.tanh(self.first(x)))


@pytest.mark.slow
def test_folds_are_admitted_in_program_order_until_the_method_cap_is_spent() -> None:
    """Two folds of 180 bytes under a cap of 200 in all: the first folds, the second is
    left outside, told how much the first left."""
    torch.manual_seed(0)
    model = _TwoBroadcasts().eval()
    inputs = model.first.inputs()
    edge = _lower(model, inputs, _budget(200))
    report = xnnfold.explain(edge)
    first, second = report.rows
    assert first.folded == ("weight",) and first.growth == 180, report.table()
    assert second.code == "XNF516" and "earlier folds left 20" in (second.reason or "")
    _assert_matches_eager(edge, model, inputs)


@pytest.mark.slow
def test_each_method_has_its_own_budget() -> None:
    """Two methods each fold 180 bytes under a cap of 200: the cap is per method."""
    torch.manual_seed(0)
    models = {
        "first": _Broadcast(how="expand", dims=1, transposed=False).eval(),
        "second": _Broadcast(how="tile", dims=1, transposed=False).eval(),
    }
    programs = {
        name: torch.export.export(xnnfold.prepare_for_xnnpack(m), m.inputs())
        for name, m in models.items()
    }
    partitioner = XnnpackFoldingPartitioner(growth_budget=_budget(200))
    edge = to_edge_transform_and_lower(programs, partitioner=[partitioner])
    report = xnnfold.explain(edge)
    assert [(r.method, r.folded, r.growth) for r in report.rows] == [
        ("first", ("weight",), 180),
        ("second", ("weight",), 180),
    ], report.table()
    for name, model in models.items():
        _assert_matches_eager(edge, model, model.inputs(), name)


class _ExpandedLinear(nn.Module):
    """``linear(x, row.expand(8, 4))``: it grows the program, and the linear takes its
    weight at run time."""

    def __init__(self) -> None:
        super().__init__()
        self.row = nn.Parameter(torch.randn(1, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.row.expand(8, 4))


@pytest.mark.slow
def test_a_growing_fold_with_a_run_time_weight_form_is_still_declined() -> None:
    """XNF508 whatever the budget: the linear stays delegated, its weight computed."""
    torch.manual_seed(0)
    model, inputs = _ExpandedLinear().eval(), (torch.randn(2, 4),)
    edge = _lower(model, inputs, _budget(2**20))
    (row,) = xnnfold.explain(edge).rows
    assert row.delegated and not row.folded and row.code == "XNF508"
    _assert_matches_eager(edge, model, inputs)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["expanded_kernel", "repeated_kernel"])
def test_no_growth_gives_the_program_without_the_budget(name: str) -> None:
    """With NO_GROWTH the broadcast kernel's convolution stays outside, as before the
    budget: the program is the stock partitioner's, byte for byte."""
    fixture = FIXTURES[name]
    folding = _lower(fixture.model(), fixture.inputs(), NO_GROWTH).to_executorch().buffer
    ep = torch.export.export(fixture.model(), fixture.inputs())
    stock = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
    assert folding == stock.to_executorch().buffer


@pytest.mark.slow
def test_the_anti_aliased_block_delegates_every_convolution() -> None:
    fixture = FIXTURES["anti_aliased_block"]
    edge = xnnfold.lower(fixture.model(), fixture.inputs())
    report = xnnfold.explain(edge)
    assert not report.outside, report.table()
    # Eight filters of 12 taps expanded to 32 channels (the up ones also scaled by 2).
    assert sum(r.growth is not None for r in report.rows) == 8
    assert math.isclose(report.growth, 8 * 31 * 12 * _FLOAT, rel_tol=0.01)
    _assert_matches_eager(edge, fixture.model(), fixture.inputs())


class _DelegateHoldsLess(nn.Module):
    """Two groups of growing folds in one delegate, the second with an intermediate
    (``kernel * 2``) shared by two convolutions, and a 1 MB embedding table on portable:
    the method's cap (5% of its parameters) covers both groups, the delegate's own
    parameters would cover one."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Parameter(torch.randn(1, 1, 3))
        self.shared = nn.Parameter(torch.randn(1, 1, 3))
        self.table = nn.Embedding(2048, 128)

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        doubled = self.shared * 2
        x = F.conv1d(x, self.first.expand(8, 1, 3), groups=8, padding=1)
        x = F.conv1d(x, doubled.expand(8, 1, 3), groups=8, padding=1)
        x = F.conv1d(x, doubled.expand(8, 1, 3).flip(-1), groups=8, padding=1)
        return x, self.table(ids)


@pytest.mark.slow
def test_the_fold_pass_folds_what_the_method_budget_admitted() -> None:
    """The fold pass sees one delegate, whose parameters are a few bytes: it must still
    fold every computation the partitioner admitted on the whole method's budget."""
    torch.manual_seed(0)
    model = _DelegateHoldsLess().eval()
    inputs = (torch.randn(1, 8, 10), torch.tensor([[1, 5, 7]]))
    edge = _lower(model, inputs, GrowthBudget(max_fold_bytes=200, max_program_fraction=0.05))
    report = xnnfold.explain(edge)
    assert all(r.folded == ("weight",) for r in report.rows), report.table()
    # 96 - 12; then two folded 96-byte kernels, less the kernel and the lifted scalar 2.
    assert report.growth == 84 + (2 * 96 - 12 - 8)
    _assert_matches_eager(edge, model, inputs)
