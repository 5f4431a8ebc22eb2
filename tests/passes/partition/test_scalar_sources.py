"""Scalars read from parameters (`.item()`) are constants and fold with the weight.

``F.linear(x, self.w * self.s.item())`` exports as ``aten.item`` (to_edge:
``_local_scalar_dense`` and ``scalar_tensor``), a symbolic float, and possibly Python
arithmetic on it. All of it is a function of the parameter, so it folds; a scalar read from
a buffer the program writes is not constant, and the GEMM keeps its run-time weight.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import xnnfold

# The full tier: the fast tier covers each rule in tests/passes/analysis and end to end once.
pytestmark = [pytest.mark.runtime, pytest.mark.slow]


class ScalarScaled(nn.Module):
    def __init__(self, where: str) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(5)
        self.weight = nn.Parameter(torch.randn(8, 16, generator=generator))
        self.bias = nn.Parameter(torch.randn(8, generator=generator))
        self.scale = nn.Parameter(torch.tensor(0.7))
        self.register_buffer("gain", torch.tensor(1.25))
        self.where = where

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight, bias = self.weight, self.bias
        if self.where == "weight":
            weight = weight * self.scale.item()
        elif self.where == "weight_arithmetic":
            weight = weight * (self.scale.item() * 2.0 + 1.0)
        elif self.where == "bias":
            bias = bias * self.scale.item()
        elif self.where == "buffer":
            weight = weight / self.gain.item()
        return F.linear(x, weight, bias)


def _inputs() -> tuple[torch.Tensor]:
    return (torch.randn(3, 16, generator=torch.Generator().manual_seed(6)),)


@pytest.mark.parametrize(
    ("where", "role"),
    [("weight", "weight"), ("weight_arithmetic", "weight"), ("bias", "bias"), ("buffer", "weight")],
)
def test_a_scalar_read_from_a_constant_folds(where: str, role: str) -> None:
    model = ScalarScaled(where).eval()
    edge = xnnfold.lower(model, _inputs())
    (row,) = xnnfold.explain(edge).rows
    assert row.delegated and row.folded == (role,), row
    assert xnnfold.summarize(edge).fully_delegated
    out = xnnfold.run_pte(edge.to_executorch().buffer, _inputs())[0]
    torch.testing.assert_close(out, model(*_inputs()), atol=1e-5, rtol=1e-5)


class WrittenGain(nn.Module):
    """The gain buffer is updated every call, so ``gain.item()`` is not a constant."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(8, 16, generator=torch.Generator().manual_seed(5)))
        self.register_buffer("gain", torch.tensor(1.25))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.linear(x, self.weight * self.gain.item())
        self.gain.add_(0.5)
        return out


def test_a_scalar_read_from_a_written_buffer_is_not_folded() -> None:
    edge = xnnfold.lower(WrittenGain().eval(), _inputs())
    (row,) = xnnfold.explain(edge).rows
    assert row.folded == ()
    assert "written by the program" in (row.reason or "")
    # (Not run: executorch serializes a mutated buffer without its initial value.)


class WrittenWeight(nn.Module):
    """The (16, 8) weight of ``torch.mm`` is a buffer the program updates every call."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer(
            "weight", torch.randn(16, 8, generator=torch.Generator().manual_seed(5))
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.mm(x, self.weight)
        self.weight.mul_(0.5)
        return out


def test_a_written_buffer_is_never_stored_as_a_gemm_weight() -> None:
    """The stock configs take any buffer as a static weight; the delegate would then
    keep the export-time value while the program halves it every call."""
    edge = xnnfold.lower(WrittenWeight().eval(), _inputs())
    (row,) = xnnfold.explain(edge).rows
    assert not row.delegated
    assert "which the program writes" in (row.reason or "")
