"""The partition stage's data flows one way: its configs are built with one immutable
set of facts and round decisions, and nothing writes onto them afterwards; what they find
comes back as values.
So one partitioner instance lowers the same program twice to the same bytes."""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest
import torch
import torch.nn.functional as F
from executorch.exir import to_edge_transform_and_lower
from executorch.exir.backend.canonical_partitioners.config_partitioner import PartitionerConfig
from torch import nn

import xnnfold
from xnnfold.passes.analysis import RoundDecisions
from xnnfold.passes.partition._folding_config import FoldingGEMMMixin, STOCK_SCRATCH_ATTRIBUTES

from tests.support.packed_sources import PackedWithDeclinedReader


class _Table(nn.Module):
    """A weight-normed table: ``embed`` stores ``v``, ``logits`` multiplies by the
    table (its `_weight_norm` kept undecomposed before ``embed`` is seen)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.v = nn.Parameter(torch.randn(256, 32))
        self.g = nn.Parameter(torch.rand(256, 1) + 0.5)


class _Lookup(nn.Module):
    def __init__(self, table: _Table) -> None:
        super().__init__()
        self.table = table

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.table.v)


class _TiedLogits(_Lookup):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, torch._weight_norm(self.table.v, self.table.g, 0))


def _state(config: PartitionerConfig) -> dict[str, Any]:
    return {k: v for k, v in vars(config).items() if k not in STOCK_SCRATCH_ATTRIBUTES}


def test_a_built_folding_config_refuses_a_new_attribute() -> None:
    partitioner = xnnfold.XnnpackFoldingPartitioner()
    configs = [
        c
        for c in partitioner.target_partitioner_configs.values()
        if isinstance(c, FoldingGEMMMixin)
    ]
    assert len(configs) == 4
    for config in configs:
        with pytest.raises(AttributeError, match="immutable once built"):
            config.decisions = RoundDecisions(non_folding=frozenset({"mm"}))


def test_a_lowering_writes_nothing_onto_any_config() -> None:
    """Every config a lowering builds, and every config of the partitioner, holds the same
    attributes after the lowering as when it was built."""
    built: list[tuple[PartitionerConfig, dict[str, Any]]] = []
    build = FoldingGEMMMixin.build.__func__  # type: ignore[attr-defined]

    def recording_build(cls: Any, *args: Any, **kwargs: Any) -> Any:
        config = build(cls, *args, **kwargs)
        built.append((config, _state(config)))
        return config

    partitioner = xnnfold.XnnpackFoldingPartitioner()
    before = [(c, _state(c)) for c in partitioner.target_partitioner_configs.values()]
    model = PackedWithDeclinedReader().eval()
    with mock.patch.object(FoldingGEMMMixin, "build", classmethod(recording_build)):
        xnnfold.lower(model, (torch.randn(3, 16),), partitioner=partitioner)
    # Configs for the ATen filter, and for each of the fixed point's two rounds.
    assert len(built) >= 3 * 4, len(built)
    for config, state in [*before, *built]:
        assert _state(config) == state, type(config).__name__


def test_one_partitioner_lowers_the_same_program_twice_identically() -> None:
    """Two methods share a table: ``logits`` folds a computation of it, ``embed`` stores
    it. The second lowering with the same instance starts from nothing the first left."""
    table = _Table().eval()
    modules = {"logits": _TiedLogits(table).eval(), "embed": _Lookup(table).eval()}
    inputs = {"logits": (torch.randn(2, 32),), "embed": (torch.randint(0, 256, (1, 5)),)}
    partitioner = xnnfold.XnnpackFoldingPartitioner()

    def lowered() -> bytes:
        programs = {k: torch.export.export(m, inputs[k]) for k, m in modules.items()}
        edge = to_edge_transform_and_lower(programs, partitioner=[partitioner])
        return edge.to_executorch().buffer

    first = lowered()
    assert lowered() == first
