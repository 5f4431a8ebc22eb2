"""Modules whose GEMM weights are slices of one packed parameter, shared by the tests of
shared sources and of the partition stage's data flow."""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["PackedWithDeclinedReader"]


class PackedWithDeclinedReader(nn.Module):
    """One packed source: a slice is a linear's weight, another slice the weight of an
    addmm XNNPACK cannot compute (its bias is per row), which stays on portable. The
    linear, accepted in the partitioner's first round, is matched again without folding:
    the fixed point runs two rounds and finds a rejection and an argument problem.

    Found by the differential campaign: the linear's fold assumed the addmm folds too, so
    inside the delegate its source still had another reader and the fold pass refused the
    mark.
    """

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.packed = nn.Parameter(torch.randn(16 * 8 + 8 * 4))
        self.row_bias = nn.Parameter(torch.randn(3, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w1 = self.packed[: 16 * 8].reshape(8, 16) * 2.0
        w2 = self.packed[16 * 8 :].reshape(8, 4) * 2.0
        h = torch.tanh(x @ w1.t())
        return torch.addmm(self.row_bias, h, w2)
