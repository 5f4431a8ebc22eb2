"""`match_once` (`xnnfold.passes.partition._matching`) is executorch's
`ConfigerationBasedPartitioner.get_matched_nodes_from_configs`, copied so that it asks each
folding config for its partition and findings together (`FoldingGEMMMixin.match`), returns
what they found and reads the program's constant inputs once instead of once per partition
member. It must group exactly as the
installed executorch does: checked by running both on the program executorch hands the
partitioner, with the stock configs and with xnnfold's. (Where the two partitioners may
differ is the fixed point around it, `matched_to_fixed_point`, which repeats the match
with new configs until every fold it accepts holds; each match it runs must agree.)

One case of each in the fast tier; the rest are slow (each lowers a model, several seconds).
"""

from __future__ import annotations

import types
from typing import Any, Callable
from unittest import mock

import pytest
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from executorch.exir.backend.canonical_partitioners.config_partitioner import (
    ConfigerationBasedPartitioner,
)
from torch import nn
from torch.export import ExportedProgram
from torch.fx import Node
from torch.nn.utils.parametrizations import weight_norm

import xnnfold
from xnnfold.passes import XnnpackFoldingPartitioner
from xnnfold.passes.partition import _matching

from tests._lowering import fixture_by_name

Groups = frozenset[frozenset[str]]
_SLOW = pytest.mark.slow

# The upstream function, whatever the partitioner overrides it with.
_upstream_match: Callable[[Any, ExportedProgram], list[list[Node]]] = (
    ConfigerationBasedPartitioner.get_matched_nodes_from_configs
)


def _named(groups: list[list[Node]]) -> Groups:
    return frozenset(frozenset(node.name for node in group) for group in groups)


class _ComparingRounds:
    """Wraps `match_once`: runs executorch's matching with the same configs before each
    round of the fixed point, and records both groupings."""

    def __init__(self) -> None:
        self.matches: list[tuple[Groups, Groups, int]] = []
        self._match_once = _matching.match_once

    def __call__(self, configs: _matching.Configs, ep: ExportedProgram) -> _matching.Matching:
        stock = types.SimpleNamespace(target_partitioner_configs=configs)
        upstream = _named(_upstream_match(stock, ep))
        ours = self._match_once(configs, ep)
        marked = len(ours.findings.folds)
        self.matches.append((upstream, _named(ours.groups), marked))
        return ours


class _ComparingStockPartitioner(XnnpackPartitioner):
    """The stock partitioner, recording executorch's matching and `match_once`'s (run
    with the stock configs) on the same program."""

    def __init__(self) -> None:
        super().__init__()
        self.matches: list[tuple[Groups, Groups, int]] = []

    def get_matched_nodes_from_configs(self, ep: ExportedProgram) -> list[list[Node]]:
        upstream = super().get_matched_nodes_from_configs(ep)
        ours = _matching.match_once(self.target_partitioner_configs, ep).groups
        self.matches.append((_named(upstream), _named(ours), 0))
        return upstream


class PlainMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(16, 32), nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x)))


class SharedWeight(nn.Module):
    """One parameter read by two GEMMs with an op between them: the second partition
    leaves out the constant the first already holds."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(16, 16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x @ self.w) @ self.w


class ConvStack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c = nn.Conv1d(4, 8, 3, padding=1)
        self.t = nn.ConvTranspose1d(8, 4, 4, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.t(torch.tanh(self.c(x)))


class WeightNormMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = weight_norm(nn.Linear(16, 32))
        self.b = nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x)))


PLAIN = {
    "mlp": (PlainMLP, (torch.randn(3, 16),)),
    "shared_weight": (SharedWeight, (torch.randn(3, 16),)),
    "convs": (ConvStack, (torch.randn(1, 4, 10),)),
}
COMPUTED = {"weight_norm_mlp": (WeightNormMLP, (torch.randn(3, 16),))}


def _stock_matches(model: nn.Module, inputs: tuple[Any, ...]) -> list[tuple[Groups, Groups, int]]:
    partitioner = _ComparingStockPartitioner()
    ep = torch.export.export(model.eval(), inputs)
    to_edge_transform_and_lower(ep, partitioner=[partitioner])
    assert partitioner.matches, "the partitioner never matched"
    return partitioner.matches


def _folding_matches(
    model: nn.Module, inputs: tuple[Any, ...], **options: Any
) -> list[tuple[Groups, Groups, int]]:
    rounds = _ComparingRounds()
    with mock.patch.object(_matching, "match_once", rounds):
        xnnfold.lower(model.eval(), inputs, partitioner=XnnpackFoldingPartitioner(**options))
    assert rounds.matches, "the partitioner never matched"
    return rounds.matches


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("shared_weight"),
        pytest.param("mlp", marks=_SLOW),
        pytest.param("convs", marks=_SLOW),
        pytest.param("weight_norm_mlp", marks=_SLOW),
    ],
)
def test_the_stock_configs_group_as_executorch_does(name: str) -> None:
    build, inputs = {**PLAIN, **COMPUTED}[name]
    for upstream, ours, _ in _stock_matches(build(), inputs):
        assert ours == upstream


@pytest.mark.slow
@pytest.mark.parametrize("name", list(PLAIN))
def test_the_folding_configs_with_nothing_to_fold_group_as_executorch_does(name: str) -> None:
    build, inputs = PLAIN[name]
    for upstream, ours, marked in _folding_matches(build(), inputs):
        assert marked == 0
        assert ours == upstream


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("weight_norm_mlp"),
        pytest.param("reused_weight_norm", marks=_SLOW),
        pytest.param("wn_conv_stack", marks=_SLOW),
    ],
)
def test_a_computed_weight_groups_as_executorch_does(name: str) -> None:
    """The folding configs take the weight computation into the GEMM's partition; with the
    configs in the same state, executorch's grouping of those partitions is the same."""
    if name in COMPUTED:
        build, inputs = COMPUTED[name]
        model, args = build(), inputs
    else:
        fixture = fixture_by_name(name)
        model, args = fixture.model(), fixture.inputs()
    matches = _folding_matches(model, args)
    assert any(marked for _, _, marked in matches), "nothing folded: the case tests nothing"
    for upstream, ours, _ in matches:
        assert ours == upstream


@pytest.mark.slow
def test_without_folding_the_computed_weight_groups_as_executorch_does() -> None:
    build, inputs = COMPUTED["weight_norm_mlp"]
    for upstream, ours, marked in _folding_matches(build(), inputs, fold=False):
        assert marked == 0
        assert ours == upstream
