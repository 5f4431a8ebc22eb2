"""A GEMM inside another GEMM's weight computation folds once, outermost first.

``addmm(W, x, mm(a, f(p)))``: the bias is computed by an ``mm`` whose own weight ``f(p)``
is a computation, so the partitioner marks both. The fold pass must evaluate the outer
bias with the inner GEMM in it, not fold the inner weight first and then evaluate the
outer computation from nodes that rewrite erased (a campaign finding: "Expected a proper
Tensor but got None").
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import xnnfold

# The full tier: the fast tier covers each rule in tests/passes/analysis and end to end once.
pytestmark = [pytest.mark.runtime, pytest.mark.slow]


class NestedBias(nn.Module):
    def __init__(self, *, depth: int) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(11)
        self.weight = nn.Parameter(torch.randn(6, 8, generator=generator))
        self.left = nn.Parameter(torch.randn(1, 3, generator=generator))
        self.right = nn.Parameter(torch.randn(3, 8, generator=generator))
        self.inner = nn.Parameter(torch.randn(3, 3, generator=generator))
        self.shift = nn.Parameter(torch.randn(8, generator=generator))
        self.depth = depth

    def bias(self) -> torch.Tensor:
        if self.depth == 0:
            # A scaled addmm of plain parameters: its own scales are marked for folding.
            return torch.addmm(self.shift, self.left, self.right, beta=0.5, alpha=2.0).reshape(8)
        right = 2.0 - self.right
        if self.depth == 2:
            # A GEMM inside the GEMM inside the bias.
            right = torch.mm(self.inner * 0.5, right)
        return torch.mm(self.left, right).reshape(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.addmm(self.bias(), x, self.weight)


def _inputs() -> tuple[torch.Tensor]:
    return (torch.randn(4, 6, generator=torch.Generator().manual_seed(12)),)


@pytest.mark.parametrize("depth", [0, 1, 2])
def test_a_bias_computed_by_a_gemm_folds_and_matches_eager(depth: int) -> None:
    model = NestedBias(depth=depth).eval()
    edge = xnnfold.lower(model, _inputs())
    assert xnnfold.summarize(edge).fully_delegated
    out = xnnfold.run_pte(edge.to_executorch().buffer, _inputs())[0]
    torch.testing.assert_close(out, model(*_inputs()), atol=1e-5, rtol=1e-5)


class HandFolded(nn.Module):
    """The same function with its bias computed once, in eager, as a parameter."""

    def __init__(self, model: NestedBias) -> None:
        super().__init__()
        with torch.no_grad():
            self.bias = nn.Parameter(model.bias())
            self.weight = nn.Parameter(model.weight.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.addmm(self.bias, x, self.weight)


@pytest.mark.parametrize("depth", [0, 1, 2])
def test_the_inner_gemms_leave_nothing_in_the_program(depth: int) -> None:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    ours = xnnfold.lower(NestedBias(depth=depth).eval(), _inputs()).to_executorch().buffer
    twin = torch.export.export(HandFolded(NestedBias(depth=depth)).eval(), _inputs())
    stock = to_edge_transform_and_lower(twin, partitioner=[XnnpackPartitioner()])
    assert len(ours) == len(stock.to_executorch().buffer)
