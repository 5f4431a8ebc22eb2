"""A delegate never outputs one value twice once XNNPACK preprocess removes its clones.

XNNPACK preprocess removes every no-op clone; a delegate whose outputs are a value and a
clone of it would then name that value twice, and preprocess stops ("Output node ... is
already in the inputs ... pass through arguments"). The stock partitioner forms such
delegates (transformers' UnivNetModel with weight_norm); the folding partitioner leaves
the clone on portable (`without_pass_through`).
"""

from __future__ import annotations

import pytest
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from torch import nn

import xnnfold
from xnnfold import XnnpackFoldingPartitioner

# The fast tier runs the folding case; the full tier the rest.
pytestmark = pytest.mark.runtime


class ValueAndClone(nn.Module):
    """relu and a clone of it, both read by ops XNNPACK does not take (cumsum)."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.relu(x)
        return torch.cumsum(h, 1), torch.cumsum(h.clone(), 2)


class TwoClones(nn.Module):
    """Two clones of a value nothing else reads outside its delegate."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.relu(x)
        return torch.cumsum(h.clone(), 1), torch.cumsum(h.clone(), 2)


class InputClone(nn.Module):
    """A clone of the program's input: preprocess keeps it, stock's program loads."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x.clone(), 1)


def _inputs() -> tuple[torch.Tensor]:
    return (torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(1)),)


def _buffer(model: nn.Module, partitioner: XnnpackPartitioner) -> bytes:
    ep = torch.export.export(model, _inputs())
    return to_edge_transform_and_lower(ep, partitioner=[partitioner]).to_executorch().buffer


@pytest.mark.slow
def test_stock_partitioner_stops_at_preprocess_on_a_value_and_its_clone() -> None:
    # Why the folding partitioner differs from stock on this program.
    with pytest.raises(RuntimeError, match="already in the inputs"):
        _buffer(ValueAndClone(), XnnpackPartitioner())


@pytest.mark.parametrize(
    "model",
    [ValueAndClone(), pytest.param(TwoClones(), marks=pytest.mark.slow)],
    ids=["value-and-clone", "two"],
)
@pytest.mark.parametrize(
    "fold", [True, pytest.param(False, marks=pytest.mark.slow)], ids=["fold", "no-fold"]
)
def test_folding_partitioner_leaves_the_clone_out_and_matches_eager(
    model: nn.Module, fold: bool
) -> None:
    buffer = _buffer(model, XnnpackFoldingPartitioner(fold=fold))
    actual = xnnfold.run_pte(buffer, _inputs())
    for got, want in zip(actual, model(*_inputs())):
        torch.testing.assert_close(got, want)


@pytest.mark.slow
def test_clone_of_an_input_partitions_as_stock() -> None:
    assert _buffer(InputClone(), XnnpackFoldingPartitioner()) == _buffer(
        InputClone(), XnnpackPartitioner()
    )
