"""`constant_tensor`: the one lookup of a constant's tensor by its state_dict / constants key."""

from __future__ import annotations

import torch
from torch import nn

from xnnfold.passes.analysis import constant_fqns, constant_tensor


class _Kinds(nn.Module):
    """A parameter, a persistent and a non-persistent buffer, and a lifted constant."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(2))
        self.register_buffer("kept", torch.full((2,), 2.0))
        self.register_buffer("scratch", torch.full((2,), 3.0), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.w + self.kept + self.scratch + torch.tensor([4.0, 4.0])


def test_every_kind_of_constant_is_found_under_its_key() -> None:
    ep = torch.export.export(_Kinds(), (torch.zeros(2),))
    found = {fqn: constant_tensor(ep, fqn) for fqn in constant_fqns(ep).values()}
    assert found["w"] is ep.state_dict["w"]
    assert found["kept"] is ep.state_dict["kept"]
    assert found["scratch"] is ep.constants["scratch"]
    (lifted,) = set(found) - {"w", "kept", "scratch"}
    assert found[lifted] is ep.constants[lifted]


def test_an_unknown_key_has_no_tensor() -> None:
    ep = torch.export.export(_Kinds(), (torch.zeros(2),))
    assert constant_tensor(ep, "no_such_constant") is None
