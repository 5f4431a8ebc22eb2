"""From matched groups to tagged partitions.

A computed weight shared by several GEMMs (a packed qkv weight) puts all of them, and the
computation, in one delegate. executorch's grouping checks merges node by node and can
miss a cycle through such a group; `acyclic_grouping` merges whole groups and checks the
contracted graph instead, without recursion (a weight computed in a thousand steps).
`per_op_partitions` and `tag_partitions` are what `XnnpackPartitioner` does with its
groups in per-op mode and when it tags them, taking the groups as an argument;
`partitions_of` is the folding partitioner's way from its final matching's groups to the
partitions it tags.
"""

from __future__ import annotations

import itertools
from typing import Iterable, Sequence

from executorch.exir.backend.canonical_partitioners.pattern_op_partitioner import (
    generate_grouped_partitions_from_list_of_nodes,
)
from executorch.exir.backend.partitioner import DelegationSpec, PartitionResult
from torch.export import ExportedProgram
from torch.fx import Graph, Node
from torch.fx.passes.infra.partitioner import Partition

from xnnfold._meta import DELEGATION_TAG_META_KEY, XNNFOLD_TAG_PREFIX
from xnnfold.passes._graph_walk import walk
from xnnfold.passes.partition._findings import Findings
from xnnfold.passes.partition._pass_through import without_pass_through
from xnnfold.passes.partition._rank import within_xnnpack_rank

__all__ = [
    "DisjointSets",
    "acyclic_grouping",
    "contracted_acyclic",
    "in_cycles",
    "partitions_of",
    "per_op_partitions",
    "tag_partitions",
]


def partitions_of(
    ep: ExportedProgram, groups: list[list[Node]], findings: Findings, *, per_op_mode: bool
) -> list[Partition]:
    """The partitions of the final matching's ``groups``, with what it found.

    The stock partitions (`XnnpackPartitioner.generate_partitions`), unless GEMMs that
    share a weight computation (a packed projection's split) were grouped into a partition
    that forms a dependency cycle with another: then the groups are merged by
    `acyclic_grouping` instead. Groups that would give XNNPACK a tensor of more than 6
    dimensions are left out first (`within_xnnpack_rank`): its runtime refuses to load
    them. Last, a clone that preprocess would turn into a pass-through output leaves its
    partition (`without_pass_through`): preprocess refuses those."""
    groups = within_xnnpack_rank(groups, findings.folds)
    partitions = (
        per_op_partitions(groups)
        if per_op_mode
        else generate_grouped_partitions_from_list_of_nodes(ep.graph_module, groups)
    )
    if findings.shared_folds and not contracted_acyclic(
        ep.graph, [list(p.nodes) for p in partitions]
    ):
        # The GEMMs of a shared computation must share a delegate; regroup the partitions
        # caught in a cycle ourselves, and keep the others as executorch made them.
        partitions = acyclic_grouping(ep.graph, groups, keep=partitions)
    return without_pass_through(partitions)


def per_op_partitions(groups: Sequence[Sequence[Node]]) -> list[Partition]:
    """`XnnpackPartitioner.generate_per_op_partitions` on ``groups``: one partition per
    matched group, in order; a group that overlaps an earlier one is an error."""
    partitions: list[Partition] = []
    ids = itertools.count()
    seen: dict[Node, str] = {}
    for group in groups:
        members = dict.fromkeys(group, str(group))
        overlap = members.keys() & seen.keys()
        if overlap:
            raise RuntimeError(
                f"per_op mode expects no overlaps between partitions but the partition "
                f"{members.keys()} overlaps with the following partitions:\n"
                + "".join(f"{seen[node]}\n" for node in overlap)
            )
        partitions.append(Partition(id=next(ids), nodes=members.keys()))
        seen.update(members)
    return partitions


def tag_partitions(
    ep: ExportedProgram, partitions: Sequence[Partition], spec: DelegationSpec
) -> PartitionResult:
    """`ConfigerationBasedPartitioner.partition` after its ``generate_partitions``: each
    node of partition ``i`` tagged ``xnnfold<i>`` (`XNNFOLD_TAG_PREFIX`) for ``spec``,
    where stock tags ``tag<i>``."""
    tags: dict[str, DelegationSpec] = {}
    for partition in partitions:
        tag = f"{XNNFOLD_TAG_PREFIX}{partition.id}"
        for node in partition.nodes:
            if DELEGATION_TAG_META_KEY in node.meta:
                raise RuntimeError(
                    f"xnnfold: node '{node.name}' is in partition "
                    f"{node.meta[DELEGATION_TAG_META_KEY]} and in partition {tag}"
                )
            node.meta[DELEGATION_TAG_META_KEY] = tag
            tags[tag] = spec
    return PartitionResult(tagged_exported_program=ep, partition_tags=tags)


def _contracted(
    graph: Graph, node_sets: Sequence[Iterable[Node]]
) -> tuple[int, dict[int, set[int]]]:
    """The graph with each node set contracted to one unit: the number of units (the
    sets first, by index, then every other node) and the edges between units."""
    unit: dict[Node, int] = {}
    for index, nodes in enumerate(node_sets):
        for node in nodes:
            unit[node] = index
    count = len(node_sets)
    for node in graph.nodes:
        if node not in unit:
            unit[node] = count
            count += 1
    edges: dict[int, set[int]] = {}
    for node in graph.nodes:
        source = unit[node]
        for user in node.users:
            target = unit[user]
            if target != source:
                edges.setdefault(source, set()).add(target)
    return count, edges


def contracted_acyclic(graph: Graph, node_sets: Sequence[Iterable[Node]]) -> bool:
    """True when the graph stays acyclic with each node set contracted to one node.

    Checking each partition on its own is not enough: two partitions can each be valid
    and still depend on each other, which only shows once both are fused.
    """
    count, edges = _contracted(graph, node_sets)
    indegree = [0] * count
    for targets in edges.values():
        for target in targets:
            indegree[target] += 1
    ready = [u for u in range(count) if indegree[u] == 0]
    visited = 0
    while ready:
        current = ready.pop()
        visited += 1
        for target in edges.get(current, ()):
            indegree[target] -= 1
            if indegree[target] == 0:
                ready.append(target)
    return visited == count


def in_cycles(graph: Graph, node_sets: Sequence[Iterable[Node]]) -> frozenset[int]:
    """The indices of the node sets that lie on a cycle once each set is contracted to
    one node (members of a strongly connected component of more than one unit), found
    without recursion (Kosaraju: finishing order forward, then components backward)."""
    count, edges = _contracted(graph, node_sets)
    finished: list[int] = []
    seen = [False] * count
    for root in range(count):
        if seen[root]:
            continue
        seen[root] = True
        stack = [(root, iter(edges.get(root, ())))]
        while stack:
            unit, targets = stack[-1]
            for target in targets:
                if not seen[target]:
                    seen[target] = True
                    stack.append((target, iter(edges.get(target, ()))))
                    break
            else:
                stack.pop()
                finished.append(unit)
    backward: dict[int, set[int]] = {}
    for source, users in edges.items():
        for target in users:
            backward.setdefault(target, set()).add(source)
    component = [-1] * count
    cyclic: set[int] = set()
    for root in reversed(finished):
        if component[root] != -1:
            continue
        component[root] = root
        members, pending = [root], [root]
        while pending:
            for source in backward.get(pending.pop(), ()):
                if component[source] == -1:
                    component[source] = root
                    members.append(source)
                    pending.append(source)
        if len(members) > 1:
            cyclic.update(members)
    return frozenset(index for index in cyclic if index < len(node_sets))


def _between(group: set[Node]) -> set[Node]:
    """Nodes outside ``group`` on a path from one of its nodes to another."""

    def below(node: Node) -> list[Node]:
        return [u for u in node.users if u not in group]

    down = set(walk([u for n in group for u in below(n)], below))

    def above(node: Node) -> list[Node]:
        return [i for i in node.all_input_nodes if i in down]

    return set(walk([i for n in group for i in above(n)], above))


def _convex_groups(graph: Graph, groups: list[set[Node]]) -> list[set[Node]]:
    """Merge into each group the groups of the nodes between its members.

    Two chained GEMMs whose weights share a packed source form one group; the permute
    between them is a group of its own, and without it the group depends on itself.
    """
    owner = {node: i for i, group in enumerate(groups) for node in group}
    merged = [set(g) for g in groups]
    alive = set(range(len(groups)))
    changed = True
    while changed:
        changed = False
        for i in sorted(alive):
            if i not in alive:
                continue
            inside = {owner[n] for n in _between(merged[i]) if n in owner} - {i}
            for j in inside & alive:
                merged[i] |= merged[j]
                for node in merged[j]:
                    owner[node] = i
                alive.discard(j)
                changed = True
    return [merged[i] for i in sorted(alive)]


def acyclic_grouping(
    graph: Graph, groups: Sequence[Iterable[Node]], *, keep: Sequence[Partition] = ()
) -> list[Partition]:
    """Merge node groups into partitions, never splitting a group, never making a cycle.

    executorch's GroupBasedPartitioner checks merges node by node, which misses a cycle
    through a group whose GEMMs read different activations (the q and kv projections of
    a cross-attention sharing a packed weight). Used only when its result (``keep``) has
    one. Its partitions on no cycle (`in_cycles`) are kept: splitting the ones on a
    cycle into their groups makes no new cycle, so none of the others needs to be split
    or lose a node. The groups of the partitions on a cycle are then placed again
    (`_placed`); one may join a kept partition. Where that placement finds no acyclic
    home for a group (a kept partition took a group that another needed beside it), every
    group is placed from nothing, as before partitions were kept.
    """
    kept_sets = [set(p.nodes) for p in keep]
    tangled = in_cycles(graph, kept_sets)
    kept = [nodes for i, nodes in enumerate(kept_sets) if i not in tangled]
    try:
        partitions = _placed(graph, kept, groups)
    except _NoAcyclicPlace:
        if not kept:
            raise
        partitions = _placed(graph, [], groups)
    return [Partition(id=i, nodes=list(p)) for i, p in enumerate(partitions)]


class _NoAcyclicPlace(RuntimeError):
    """A group that shares no partition without a cycle and cannot stand alone either."""


def _placed(
    graph: Graph, partitions: list[set[Node]], groups: Sequence[Iterable[Node]]
) -> list[set[Node]]:
    """``partitions`` with every node of ``groups`` outside them placed, group by group, in
    the order their computation runs: each group goes into the highest-numbered
    partition it touches, or else the last one, that it joins without a cycle, and
    otherwise into a partition of its own.

    Raises:
        _NoAcyclicPlace: a group depends on itself through nodes outside it wherever it
            goes.
    """
    order = {node: i for i, node in enumerate(graph.nodes)}

    def position(group: set[Node]) -> int:
        # A GEMM's group holds its parameters, which come first in the graph: where its
        # computation starts says where it runs.
        computed = [order[n] for n in group if n.op != "placeholder"]
        return min(computed or [order[n] for n in group])

    partitions = [set(p) for p in partitions]
    owner: dict[Node, int] = {n: i for i, nodes in enumerate(partitions) for n in nodes}
    # A group partly in a kept partition (executorch moves a getitem to its producer's)
    # places the rest.
    remaining = [set(g) - owner.keys() for g in groups]
    pending = sorted(_convex_groups(graph, [g for g in remaining if g]), key=position)
    for group in pending:
        neighbours = {
            owner[other]
            for node in group
            for other in (*node.all_input_nodes, *node.users)
            if other in owner
        }
        candidates = sorted(neighbours, reverse=True)
        if partitions and len(partitions) - 1 not in neighbours:
            candidates.append(len(partitions) - 1)
        for index in candidates:
            trial = [p if i != index else p | group for i, p in enumerate(partitions)]
            if contracted_acyclic(graph, trial):
                partitions[index] |= group
                owner.update(dict.fromkeys(group, index))
                break
        else:
            if not contracted_acyclic(graph, [*partitions, group]):
                raise _NoAcyclicPlace(
                    "xnnfold: the nodes "
                    f"{sorted(n.name for n in group)[:6]} must share one delegate but "
                    "depend on each other through nodes outside it. Lower this model "
                    "with XnnpackFoldingPartitioner(fold=False) and report the model."
                )
            owner.update(dict.fromkeys(group, len(partitions)))
            partitions.append(group)
    return partitions


class DisjointSets:
    """Union-find over nodes, iterative.

    executorch's `DSJ` finds roots recursively, and its unions chain every node of one
    partition behind the next: a partition of about a thousand nodes (a weight computed
    by a few hundred elementwise steps) exceeds Python's recursion limit. Same unions,
    same roots and the same group order, without the recursion.
    """

    def __init__(self) -> None:
        self.parent: dict[Node, Node] = {}

    def find(self, node: Node) -> Node:
        parent = self.parent
        root = parent.setdefault(node, node)
        while parent[root] is not root:
            root = parent[root]
        while parent[node] is not root:
            parent[node], node = root, parent[node]
        return root

    def union(self, a: Node, b: Node) -> None:
        self.parent[self.find(a)] = self.find(b)

    def groups(self) -> list[list[Node]]:
        groups: dict[Node, set[Node]] = {}
        for node in list(self.parent):
            groups.setdefault(self.find(node), set()).add(node)
        return [list(group) for group in groups.values()]
