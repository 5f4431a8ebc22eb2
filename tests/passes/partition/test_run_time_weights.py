"""GEMMs the folding partitioner delegates with a weight computed at run time are right.

When folding a computed weight would grow the program (a low-rank ``a @ b``), the folding
configs still delegate the mm, addmm or linear, with the weight computed inside the
delegate: a graph the stock partitioner never delegates without
``force_non_static_weights_for_f32_linear``, so XNNPACK's passes were never tested on it.
Two of them get it wrong, and those GEMMs stay on portable:

- XNNPACK's ConvertToLinearPass turns ``mm(x, permute(W))`` into ``linear(x, W)`` for any
  permute: an identity permute (``W.permute(0, 1)``) becomes ``x @ W.T``, a silently wrong
  square result (off by 21 before this rule) and a shape error otherwise;
- XNNPACK's fully-connected op takes a non-static weight only in fp32 (or fp16): a bf16
  one (``enable_bf16``) lowered, then failed to load.

Each case runs the `.pte` through executorch.runtime against eager.
"""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch
from executorch.exir import to_edge_transform_and_lower
from torch import nn

import xnnfold
from xnnfold._upstream import supports_bf16

# The full tier: the fast tier covers each rule in tests/passes/analysis and end to end once.
pytestmark = [pytest.mark.runtime, pytest.mark.slow]

# A rank-2 product of 16x2 and 2x16 parameters: folding it would store 1 KiB in place of
# 256 bytes, so the folding partitioner computes it at run time instead.
N, RANK = 16, 2


class LowRank(nn.Module):
    def __init__(
        self, weight_of: Callable[[torch.Tensor], torch.Tensor], *, addmm: bool = False
    ) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(3)
        self.a = nn.Parameter(torch.randn(N, RANK, generator=generator))
        self.b = nn.Parameter(torch.randn(RANK, N, generator=generator))
        self.bias = nn.Parameter(torch.randn(N, generator=generator))
        self.weight_of, self.addmm = weight_of, addmm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight_of(self.a @ self.b)
        return torch.addmm(self.bias, x, weight) if self.addmm else x @ weight


def _identity(w: torch.Tensor) -> torch.Tensor:
    return w.permute(0, 1)


def _identity_negative(w: torch.Tensor) -> torch.Tensor:
    return w.permute(-2, -1)


def _transpose(w: torch.Tensor) -> torch.Tensor:
    return w.permute(1, 0)


def _lower(model: nn.Module, partitioner: Any) -> tuple[Any, bytes]:
    x = torch.randn(4, N, generator=torch.Generator().manual_seed(4))
    edge = to_edge_transform_and_lower(torch.export.export(model, (x,)), partitioner=[partitioner])
    return edge, edge.to_executorch().buffer


def _outer_gemm(edge: Any) -> Any:
    """The GEMM on the activation (the product ``a @ b`` is a GEMM too, listed first)."""
    return [r for r in xnnfold.explain(edge).rows if r.op in ("mm", "addmm")][-1]


def _error(model: nn.Module, buffer: bytes) -> float:
    x = torch.randn(4, N, generator=torch.Generator().manual_seed(4))
    (out,) = xnnfold.run_pte(buffer, (x,))
    return float((out - model(x)).abs().max())


@pytest.mark.parametrize("permute", [_identity, _identity_negative], ids=["dims_0_1", "dims_-2_-1"])
@pytest.mark.parametrize("addmm", [False, True], ids=["mm", "addmm"])
def test_an_identity_permute_computed_at_run_time_stays_on_portable(
    permute: Callable[[torch.Tensor], torch.Tensor], addmm: bool
) -> None:
    model = LowRank(permute, addmm=addmm).eval()
    edge, buffer = _lower(model, xnnfold.XnnpackFoldingPartitioner())
    assert _error(model, buffer) < 1e-4
    gemm = _outer_gemm(edge)
    assert not gemm.delegated
    assert "not a transpose" in (gemm.reason or ""), gemm


@pytest.mark.parametrize("weight_of", [_identity, _transpose], ids=["identity", "transpose"])
def test_with_run_time_weights_forced_the_result_matches_eager(
    weight_of: Callable[[torch.Tensor], torch.Tensor],
) -> None:
    """With force_non_static_weights_for_f32_linear the stock partitioner delegates the
    identity-permuted weight and is wrong (docs/how-it-works.md, Trust); the folding partitioner is not."""
    model = LowRank(weight_of).eval()
    _, buffer = _lower(
        model, xnnfold.XnnpackFoldingPartitioner(force_non_static_weights_for_f32_linear=True)
    )
    assert _error(model, buffer) < 1e-4


def test_a_transpose_computed_at_run_time_is_still_delegated() -> None:
    model = LowRank(_transpose).eval()
    edge, buffer = _lower(model, xnnfold.XnnpackFoldingPartitioner())
    assert _error(model, buffer) < 1e-4
    gemm = _outer_gemm(edge)
    assert gemm.delegated and gemm.folded == (), gemm


def test_an_identity_permute_that_folds_is_still_delegated() -> None:
    """A plain parameter behind the identity permute folds (nothing to grow): the delegate
    sees a constant, not the permute."""

    class Plain(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(N, N, generator=torch.Generator().manual_seed(5)))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x @ self.w.permute(0, 1)

    model = Plain().eval()
    edge, buffer = _lower(model, xnnfold.XnnpackFoldingPartitioner())
    assert _error(model, buffer) < 1e-4
    gemm = _outer_gemm(edge)
    assert gemm.delegated and gemm.folded == ("weight",), gemm


class _LowRankBf16(nn.Module):
    """A bf16 weight computed at run time: XNNPACK's fully-connected op takes a non-static
    filter only in fp32 or fp16, so the mm has no run-time-weight form."""

    def __init__(self) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(6)
        self.a = nn.Parameter(torch.randn(N, RANK, generator=generator).bfloat16())
        self.b = nn.Parameter(torch.randn(RANK, N, generator=generator).bfloat16())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ (self.a @ self.b)


def _lower_bf16(**options: Any) -> Any:
    """The lowered program, once checked bit-exact against eager through the runtime."""
    model = _LowRankBf16().eval()
    x = torch.randn(4, N, generator=torch.Generator().manual_seed(4)).bfloat16()
    edge = to_edge_transform_and_lower(
        torch.export.export(model, (x,)),
        partitioner=[xnnfold.XnnpackFoldingPartitioner(enable_bf16=True, **options)],
    )
    (out,) = xnnfold.run_pte(edge.to_executorch().buffer, (x,))
    torch.testing.assert_close(out, model(x), rtol=0.0, atol=0.0)
    return edge


@pytest.mark.skipif(not supports_bf16(), reason="this executorch has no bf16 delegation")
def test_a_bf16_weight_computed_at_run_time_stays_on_portable_without_growth() -> None:
    """Found by reading XNNPACK's fully-connected definition (a non-static filter must be
    fp32 or fp16): delegated unfolded, the program lowered and then failed to load."""
    edge = _lower_bf16(growth_budget=xnnfold.NO_GROWTH)
    assert not _outer_gemm(edge).delegated


@pytest.mark.skipif(not supports_bf16(), reason="this executorch has no bf16 delegation")
def test_a_bf16_weight_computed_at_run_time_folds_within_the_growth_budget() -> None:
    """With no run-time-weight form, a growing fold is the only way into the delegate:
    the default budget admits it (docs/growth-budget.md)."""
    edge = _lower_bf16()
    gemm = _outer_gemm(edge)
    assert gemm.delegated and gemm.folded == ("weight",) and gemm.growth > 0, gemm


@pytest.mark.parametrize("addmm", [False, True], ids=["mm", "addmm"])
def test_a_non_square_weight_computed_at_run_time_matches_eager(addmm: bool) -> None:
    """XNNPACK serializes a run-time mm/addmm weight as [in, out] with its
    transpose-weights flag: a square weight would not show a layout mix-up."""

    class Wide(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            generator = torch.Generator().manual_seed(8)
            self.a = nn.Parameter(torch.randn(N, RANK, generator=generator))
            self.b = nn.Parameter(torch.randn(RANK, 3 * N, generator=generator))
            self.bias = nn.Parameter(torch.randn(3 * N, generator=generator))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            weight = self.a @ self.b
            return torch.addmm(self.bias, x, weight) if addmm else x @ weight

    model = Wide().eval()
    edge, buffer = _lower(model, xnnfold.XnnpackFoldingPartitioner())
    assert _error(model, buffer) < 1e-4
    gemm = _outer_gemm(edge)
    assert gemm.delegated and gemm.folded == (), gemm
