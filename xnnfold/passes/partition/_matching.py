"""The folding partitioner's matching: executorch's grouping of every config's partition,
repeated with new decisions until every fold it accepts still holds.

Each round builds its configs with the previous round's decisions (`RoundDecisions`,
through ``configs_for``), runs the match, and returns the groups with what the configs
found (`Matching`); the next round's decisions are computed from those values. Nothing
is carried between rounds except the decisions, and nothing is written onto the graph:
the partitioner writes the final round's marks (`_outcome.write_fold_marks`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

from executorch.exir.backend.canonical_partitioners.config_partitioner import (
    format_target_name,
    PartitionerConfig,
)
from torch.export import ExportedProgram
from torch.fx import Node

from xnnfold.passes._ops import EDGE_GEMM_ARGS
from xnnfold.passes.analysis import (
    AnalysisCache,
    constant_computation,
    constant_fqns,
    RoundDecisions,
    value_bytes,
)
from xnnfold.passes.partition._findings import Findings, NO_FINDINGS
from xnnfold.passes.partition._folding_config import FoldingGEMMMixin
from xnnfold.passes.partition._grouping import DisjointSets

__all__ = ["Matching", "match_once", "matched_to_fixed_point"]

Configs = Mapping[str, PartitionerConfig]


@dataclass(frozen=True)
class Matching:
    """One round's groups (executorch's `get_matched_nodes_from_configs` result) and what
    its configs found."""

    groups: list[list[Node]]
    findings: Findings


def match_once(configs: Configs, ep: ExportedProgram) -> Matching:
    """executorch's `ConfigerationBasedPartitioner.get_matched_nodes_from_configs`
    with ``configs``, returning what the folding configs found with the groups."""
    sets = DisjointSets()
    findings = NO_FINDINGS
    # executorch's is_constant_data rebuilds the signature's maps on every call: asked
    # once per partition member, it made lowering quadratic in the program's inputs.
    constant_data = constant_fqns(ep)
    for node in ep.graph_module.graph.nodes:
        if node.op != "call_function":
            continue
        config = configs.get(format_target_name(node.target.__name__))
        if config is None:
            continue
        if isinstance(config, FoldingGEMMMixin):
            match = config.match(node, ep)
            findings = findings.merged(match.findings)
            candidate = match.partition
        else:
            candidate = (
                config.get_partition(node, ep) if config.check_constraints(node, ep) else None
            )
        if candidate is None:
            continue
        partition = [
            # The partitioner copies constant data into every partition that reads
            # it, so a constant another partition already holds need not join.
            n
            for n in candidate
            if not (n in sets.parent and n.name in constant_data)
        ]
        if partition:
            sets.find(partition[0])
            for other in partition[1:]:
                sets.union(partition[0], other)
    return Matching(sets.groups(), findings)


def matched_to_fixed_point(
    ep: ExportedProgram,
    configs_for: Callable[[RoundDecisions], Configs],
    *,
    cache: AnalysisCache,
) -> Matching:
    """`match_once`, repeated until every fold it accepts still holds (``cache``: the
    partitioner's sweeps of ``ep``, which its configs read too).

    The predicate counts another GEMM's weight computation as a reader that folds too.
    When that GEMM is then declined (an argument XNNPACK cannot compute, a stock rule) or
    takes its weight at run time, its computation keeps the shared source alive; the GEMMs
    that were accepted on that assumption are matched again with those GEMMs named as
    readers that keep what they read (`RoundDecisions.non_folding`).

    A GEMM declined only to keep the program small can still cost bytes: when another
    partition holds its sources (a GEMM that must fold them) and a delegate reads them
    unfolded (its run-time weight computation, pulled in by the stock configs),
    executorch gives that delegate its own copy of each. Such GEMMs are matched again,
    folding (`RoundDecisions.fold_anyway`, `copied_sources_gemms`). Both sets only grow,
    so this ends; without shared sources it is one round.
    """
    decisions = RoundDecisions()
    while True:
        matching = match_once(configs_for(decisions), ep)
        non_folding = decisions.non_folding | unfolded_constant_gemms(ep, matching, cache=cache)
        fold_anyway = decisions.fold_anyway | copied_sources_gemms(ep, matching)
        if non_folding == decisions.non_folding and fold_anyway == decisions.fold_anyway:
            return matching
        decisions = RoundDecisions(non_folding=non_folding, fold_anyway=fold_anyway)


def _copy_freed(source: Node, members: set[Node], group_of: dict[Node, int]) -> bool:
    """Whether folding the computation ``members`` spares a copy of ``source``: a group
    other than the one holding it reads it, only through ``members``."""
    held = group_of.get(source)
    if held is None:
        return False
    readers: dict[int, list[Node]] = {}
    for user in source.users:
        group = group_of.get(user, held)
        if group != held:
            readers.setdefault(group, []).append(user)
    return any(all(user in members for user in users) for users in readers.values())


def copied_sources_gemms(ep: ExportedProgram, matching: Matching) -> frozenset[str]:
    """GEMMs declined for size whose shared sources a partition holds while another
    partition reads them unfolded, when the folded tensor is no larger than the copies
    executorch would make."""
    group_of = {node: index for index, group in enumerate(matching.groups) for node in group}
    found: set[str] = set()
    # The match recorded every declined computation of constants, and for those declined
    # only to keep the program small, the computation.
    for (node, index), rejection in matching.findings.rejections.items():
        if node.name in found or not rejection.computed_from_constants:
            continue
        computation = matching.findings.correct_alone.get((node, index))
        # Intermediates another reader needs would stay in the delegate, computed by ops
        # no XNNPACK config checked: only computations that share sources alone.
        if computation is None or computation.shared:
            continue
        members = set(computation.nodes)
        # A source nothing else reads costs nothing to claim; one that something else
        # reads and no partition holds yet would be copied once claimed.
        if not all(
            source in group_of or set(source.users) <= members for source in computation.sources
        ):
            continue
        copied = [s for s in computation.sources if _copy_freed(s, members, group_of)]
        folded = value_bytes(computation.root)
        copies = [value_bytes(s) for s in copied]
        if (
            copied
            and folded is not None
            and None not in copies
            and folded <= sum(c for c in copies if c is not None)
        ):
            found.add(node.name)
    return frozenset(found)


def unfolded_constant_gemms(
    ep: ExportedProgram, matching: Matching, *, cache: AnalysisCache
) -> frozenset[str]:
    """GEMMs with an argument computed from constants that is not folded into them."""
    members = {node for group in matching.groups for node in group}
    found: set[str] = set()
    for node in ep.graph.nodes:
        positions = EDGE_GEMM_ARGS.get(node.target) if node.op == "call_function" else None
        if not positions:
            continue
        marks = matching.findings.folds.get(node.name, {}) if node in members else {}
        if any(
            index not in marks and constant_computation(ep, node, index, cache=cache)
            for index in positions
        ):
            found.add(node.name)
    return frozenset(found)
