"""`_grouping`: where executorch's partitions have a cycle, only those on it are regrouped;
each partition is tagged with xnnfold's prefix.

The end-to-end cases (packed projections, cross-attention) are in test_shared.py and
test_long_computations.py; these are the rules on hand-built graphs.
"""

from __future__ import annotations

import torch
from executorch.exir.backend.partitioner import DelegationSpec
from torch.fx.passes.infra.partitioner import Partition

from xnnfold._meta import DELEGATION_TAG_META_KEY
from xnnfold.passes.partition._grouping import (
    acyclic_grouping,
    contracted_acyclic,
    in_cycles,
    tag_partitions,
)


def _graph() -> tuple[torch.fx.Graph, dict[str, torch.fx.Node]]:
    # a -> b -> c and a -> c (the diamond: {a, c} depends on itself through b), then two
    # nodes p and r that depend on x alone, p computed before the diamond, r after it.
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    p = graph.call_function(torch.sigmoid, (x,))
    a = graph.call_function(torch.relu, (x,))
    b = graph.call_function(torch.tanh, (a,))
    c = graph.call_function(torch.add, (a, b))
    r = graph.call_function(torch.neg, (x,))
    graph.output((p, c, r))
    return graph, {"p": p, "a": a, "b": b, "c": c, "r": r}


def test_in_cycles_names_the_sets_on_a_cycle() -> None:
    graph, n = _graph()
    assert in_cycles(graph, [[n["p"], n["r"]], [n["a"], n["c"]]]) == {1}


def test_in_cycles_is_empty_where_the_contraction_is_acyclic() -> None:
    graph, n = _graph()
    sets = [[n["a"]], [n["c"]], [n["p"], n["r"]]]
    assert contracted_acyclic(graph, sets)
    assert in_cycles(graph, sets) == frozenset()


def test_regrouping_keeps_each_partition_on_no_cycle_whole() -> None:
    # executorch grouped p and r, which nothing connects; placing every group again
    # from scratch would put p with a (the latest partition when p comes) and r with c.
    graph, n = _graph()
    keep = [
        Partition(id=0, nodes=[n["p"], n["r"]]),
        Partition(id=1, nodes=[n["a"], n["c"]]),
    ]
    groups = [[n["p"]], [n["a"]], [n["c"]], [n["r"]]]
    partitions = [set(p.nodes) for p in acyclic_grouping(graph, groups, keep=keep)]
    assert any({n["p"], n["r"]} <= nodes for nodes in partitions)
    assert not any({n["a"], n["c"]} <= nodes for nodes in partitions)
    assert contracted_acyclic(graph, partitions)
    assert sorted(len(nodes) for nodes in partitions) == [1, 3]


def _placed_once(partitions: list[Partition], groups: list[list[torch.fx.Node]]) -> bool:
    placed = [node for partition in partitions for node in partition.nodes]
    return len(placed) == len(set(placed)) and set(placed) == {n for g in groups for n in g}


def test_a_group_partly_in_a_kept_partition_places_the_rest() -> None:
    graph, n = _graph()
    keep = [
        Partition(id=0, nodes=[n["p"]]),
        Partition(id=1, nodes=[n["a"], n["c"]]),
    ]
    groups = [[n["p"], n["b"]], [n["a"]], [n["c"]]]
    partitions = acyclic_grouping(graph, groups, keep=keep)
    assert _placed_once(partitions, groups)
    assert contracted_acyclic(graph, [list(p.nodes) for p in partitions])


def test_regrouping_falls_back_to_placing_every_group() -> None:
    # executorch's partitions: [b, u, v, w] and [a, c] on a cycle, [k] kept. Placed
    # around [k], {u, v} joins it and {a, b, c} then has no acyclic place (o, in no
    # group, is between k and c); placed from nothing, every group has one.
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    u = graph.call_function(torch.neg, (x,))
    a = graph.call_function(torch.relu, (x,))
    b = graph.call_function(torch.tanh, (a,))
    k = graph.call_function(torch.sigmoid, (x,))
    o = graph.call_function(torch.exp, (k,))
    c = graph.call_function(torch.add, (b, o))
    v = graph.call_function(torch.neg, (a,))
    w = graph.call_function(torch.neg, (o,))
    graph.output((u, c, v, w))
    groups = [[b], [k], [w], [c, a], [u, v]]
    keep = [
        Partition(id=0, nodes=[b, u, v, w]),
        Partition(id=1, nodes=[a, c]),
        Partition(id=2, nodes=[k]),
    ]
    assert in_cycles(graph, [list(p.nodes) for p in keep]) == {0, 1}
    partitions = acyclic_grouping(graph, groups, keep=keep)
    assert _placed_once(partitions, groups)
    assert contracted_acyclic(graph, [list(p.nodes) for p in partitions])
    assert any({a, b, c} <= set(p.nodes) for p in partitions)


def test_each_partition_is_tagged_xnnfold_and_its_number() -> None:
    # The preprocess hook's copy tells xnnfold's delegates by this prefix.
    torch.manual_seed(0)
    ep = torch.export.export(
        torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Tanh()), (torch.randn(2),)
    )
    relu, tanh = [node for node in ep.graph.nodes if node.op == "call_function"]
    spec = DelegationSpec("XnnpackBackend", [])
    result = tag_partitions(
        ep, [Partition(id=3, nodes=[relu]), Partition(id=7, nodes=[tanh])], spec
    )
    assert relu.meta[DELEGATION_TAG_META_KEY] == "xnnfold3"
    assert tanh.meta[DELEGATION_TAG_META_KEY] == "xnnfold7"
    assert result.partition_tags == {"xnnfold3": spec, "xnnfold7": spec}
