"""A program that lowers must load: no delegate gets a tensor of more than 6 dimensions.

XNNPACK's runtime defines no tensor of more than 6 dimensions and executorch.runtime then
refuses the whole method; the stock configs never check that rank, so a 7-D permute (an
``einsum`` over six indices, as UnivNet's location-variable convolution decomposes) is
delegated and the `.pte` cannot be loaded. The folding partitioner leaves such ops on the
portable kernels (`within_xnnpack_rank`), and still folds the computed weights around them.
"""

from __future__ import annotations

import pytest
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from torch import nn
from torch.nn.utils.parametrizations import weight_norm

import xnnfold
from xnnfold import XnnpackFoldingPartitioner
from xnnfold.passes.partition._rank import over_rank, XNN_MAX_TENSOR_DIMS

# The fast tier runs the unit check and the folding case; the full tier the rest.
pytestmark = pytest.mark.runtime


class SevenDims(nn.Module):
    """A weight_norm conv, a 7-D unsqueeze/permute between reshapes, a weight_norm linear."""

    def __init__(self, *, computed: bool = True) -> None:
        super().__init__()
        self.conv = nn.Conv1d(4, 8, 3, padding=1)
        self.lin = nn.Linear(8, 8)
        if computed:
            weight_norm(self.conv)
            weight_norm(self.lin)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.conv(x))  # (1, 8, 6)
        h = h.reshape(1, 2, 2, 2, 3, 2).unsqueeze(6)  # 7-D
        h = h.permute(0, 6, 5, 4, 3, 2, 1).reshape(1, 6, 8)
        return self.lin(torch.relu(h))


def _inputs() -> tuple[torch.Tensor]:
    return (torch.randn(1, 4, 6, generator=torch.Generator().manual_seed(1)),)


def _seven_d_nodes(ep: torch.export.ExportedProgram) -> list[str]:
    return [n.name for n in ep.graph.nodes if n.op == "call_function" and over_rank(n)]


def test_over_rank_sees_a_seven_dimensional_input_or_output() -> None:
    ep = torch.export.export(SevenDims(computed=False).eval(), _inputs())
    found = _seven_d_nodes(ep)
    # The unsqueeze makes it, the permute reads and makes it, the reshape reads it.
    assert len(found) == 3, found
    assert XNN_MAX_TENSOR_DIMS == 6


def test_folding_partitioner_program_loads_and_folds_around_seven_dims() -> None:
    model = SevenDims().eval()
    edge = xnnfold.lower(model, _inputs())
    report = xnnfold.explain(edge)
    assert not report.outside, report
    assert len(report.folded) == 2, report
    buffer = edge.to_executorch().buffer
    with torch.no_grad():
        expected = model(*_inputs())
    (actual,) = xnnfold.run_pte(buffer, _inputs())
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)


def _lowered(model: nn.Module, partitioner: XnnpackPartitioner) -> bytes:
    ep = torch.export.export(model, _inputs())
    return to_edge_transform_and_lower(ep, partitioner=[partitioner]).to_executorch().buffer


@pytest.mark.slow
def test_stock_partitioner_writes_a_program_that_does_not_load() -> None:
    # Why the folding partitioner differs from stock here, on a program with no computed
    # weight: stock delegates the 7-D permute, and the runtime refuses it.
    buffer = _lowered(SevenDims(computed=False).eval(), XnnpackPartitioner())
    with pytest.raises(RuntimeError, match="Failed to load method forward"):
        xnnfold.run_pte(buffer, _inputs())


@pytest.mark.slow
@pytest.mark.parametrize("fold", [True, False], ids=["fold", "no-fold"])
def test_without_computed_weights_the_program_loads_equal_to_eager(fold: bool) -> None:
    model = SevenDims(computed=False).eval()
    buffer = _lowered(model, XnnpackFoldingPartitioner(fold=fold))
    with torch.no_grad():
        expected = model(*_inputs())
    (actual,) = xnnfold.run_pte(buffer, _inputs())
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)


class SevenDimLinear(nn.Module):
    """A linear on a 7-D activation: kept whole it would be a 7-D delegate input."""

    def __init__(self, *, computed: bool = True) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        if computed:
            weight_norm(self.lin)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x)


def _seven_d_activation() -> tuple[torch.Tensor]:
    return (torch.randn(1, 1, 2, 1, 1, 2, 8, generator=torch.Generator().manual_seed(1)),)


@pytest.mark.slow
def test_linear_on_seven_dims_decomposes_and_folds() -> None:
    # Not kept whole (no kernel would take it): its 2D addmm is delegated with the fold.
    model = SevenDimLinear().eval()
    edge = xnnfold.lower(model, _seven_d_activation())
    report = xnnfold.explain(edge)
    assert [(row.op, row.delegated, row.folded) for row in report.rows] == [
        ("addmm", True, ("weight",))
    ], report
    with torch.no_grad():
        expected = model(*_seven_d_activation())
    (actual,) = xnnfold.run_pte(edge.to_executorch().buffer, _seven_d_activation())
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_linear_on_seven_dims_without_computed_weight_loads() -> None:
    model = SevenDimLinear(computed=False).eval()
    ep = torch.export.export(model, _seven_d_activation())
    edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackFoldingPartitioner()])
    with torch.no_grad():
        expected = model(*_seven_d_activation())
    (actual,) = xnnfold.run_pte(edge.to_executorch().buffer, _seven_d_activation())
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)
