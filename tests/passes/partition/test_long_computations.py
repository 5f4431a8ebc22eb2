"""Weight computations of any length lower, fold and match eager; the cost stays linear.

executorch's config partitioner groups a partition's nodes with a recursive union-find
whose chains grow with the partition, so a weight computed by a few hundred elementwise
steps used to raise RecursionError in lowering. The folding partitioner groups
iteratively, and the predicate and the fold walk iteratively too.
"""

from __future__ import annotations

import random

import pytest
import torch
from executorch.exir.backend.canonical_partitioners.config_partitioner import DSJ
from torch.export.graph_signature import ExportGraphSignature
from torch.fx import Graph

import xnnfold
from xnnfold import XnnpackFoldingPartitioner
from xnnfold.fixtures._patterns import ChainedWeight
from xnnfold.passes.partition._grouping import DisjointSets

# The full tier: the fast tier covers each rule in tests/passes/analysis and end to end once.
pytestmark = pytest.mark.slow


def _inputs() -> tuple[torch.Tensor]:
    return (torch.randn(2, 16, generator=torch.Generator().manual_seed(2)),)


def _check_folded(steps: int) -> None:
    model = ChainedWeight(steps).eval()
    edge = xnnfold.lower(model, _inputs())
    (row,) = xnnfold.explain(edge).rows
    assert row.delegated and row.folded == ("weight",), row
    out = xnnfold.run_pte(edge.to_executorch().buffer, _inputs())[0]
    torch.testing.assert_close(out, model(*_inputs()), atol=1e-4, rtol=1e-4)


@pytest.mark.runtime
def test_a_600_node_weight_computation_folds() -> None:
    _check_folded(300)


@pytest.mark.runtime
@pytest.mark.campaign
def test_a_2500_node_weight_computation_folds() -> None:
    # Past Python's recursion limit (1,000 frames) twice over; bench_chain.py runs 5,000.
    _check_folded(1250)


@pytest.mark.runtime
def test_a_computation_over_max_fold_nodes_is_declined_and_still_correct() -> None:
    # 80 nodes over a cap of 50: the declined steps are lowered one by one, so a longer
    # chain only costs minutes.
    model = ChainedWeight(40).eval()
    edge = xnnfold.lower(model, _inputs(), partitioner=XnnpackFoldingPartitioner(max_fold_nodes=50))
    (row,) = xnnfold.explain(edge).rows
    assert row.folded == ()
    assert "more than 50 nodes" in (row.reason or "")
    out = xnnfold.run_pte(edge.to_executorch().buffer, _inputs())[0]
    torch.testing.assert_close(out, model(*_inputs()), atol=1e-4, rtol=1e-4)


def _signature_reads_while_partitioning(steps: int, monkeypatch: pytest.MonkeyPatch) -> int:
    """How often partitioning a ``steps``-long chain builds the signature's parameter map
    (torch builds it anew on every read)."""
    reads = 0
    partitioning = False
    prop = ExportGraphSignature.inputs_to_parameters

    def counted(self: ExportGraphSignature) -> object:
        nonlocal reads
        reads += partitioning
        return prop.fget(self)  # type: ignore[attr-defined]

    original = XnnpackFoldingPartitioner.partition

    def partition(self: XnnpackFoldingPartitioner, ep: torch.export.ExportedProgram) -> object:
        nonlocal partitioning
        partitioning = True
        try:
            return original(self, ep)
        finally:
            partitioning = False

    with monkeypatch.context() as patch:
        patch.setattr(ExportGraphSignature, "inputs_to_parameters", property(counted))
        patch.setattr(XnnpackFoldingPartitioner, "partition", partition)
        xnnfold.lower(ChainedWeight(steps).eval(), _inputs())
    return reads


def test_partitioning_reads_the_signature_a_fixed_number_of_times(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Read once per node, a map over every input made lowering quadratic in the length.
    short = _signature_reads_while_partitioning(20, monkeypatch)
    assert short > 0, "the count saw no partitioning"
    assert _signature_reads_while_partitioning(100, monkeypatch) == short


def _chain_graph(length: int) -> list:
    graph = Graph()
    return [graph.placeholder(f"n{i}") for i in range(length)]


def test_disjoint_sets_group_a_long_partition_without_recursion() -> None:
    nodes = _chain_graph(20_000)
    sets = DisjointSets()
    sets.find(nodes[0])
    for node in nodes[1:]:
        sets.union(nodes[0], node)
    (group,) = sets.groups()
    assert set(group) == set(nodes)


def test_disjoint_sets_group_as_executorch_does() -> None:
    nodes = _chain_graph(60)
    rng = random.Random(0)
    partitions = [rng.sample(nodes, rng.randint(1, 5)) for _ in range(25)]
    ours, theirs = DisjointSets(), DSJ()
    for partition in partitions:
        for sets in (ours, theirs):
            sets.find(partition[0])
            for other in partition[1:]:
                sets.union(partition[0], other)
    assert [set(g) for g in ours.groups()] == [set(g) for g in theirs.gen_groups()]
