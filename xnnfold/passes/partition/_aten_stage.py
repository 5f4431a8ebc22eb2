"""The partitioner's answers about a method's ATen program, before decomposition.

`to_edge_transform_and_lower` asks every method's partitioners which ops to keep out of
decomposition (``ops_to_not_decompose``) before it partitions any method. On the ATen
program the partitioner first notes what the method does with its constants in the
lowering's `CrossMethodFacts` (`note_method`), then answers with the stock ops and filter
plus the ops of the foldable weight computations its plan keeps (`ops_to_keep`). The
filter marks each node it keeps (`mark_preserved`): the decompositions rename those nodes,
and the mark is how the partition finds them in the edge program.
"""

from __future__ import annotations

from typing import Callable, Mapping, Optional

import torch
from executorch.exir.backend.canonical_partitioners.config_partitioner import (
    PartitionerConfig,
)
from torch.export import ExportedProgram
from torch.fx import Node

from xnnfold._upstream import OpOverload
from xnnfold.passes.analysis import AnalysisCache, ProgramFacts, stored_constants
from xnnfold.passes.partition._asked import AskedConstants
from xnnfold.passes.partition._aten_plan import AtenPlan
from xnnfold.passes.partition._decompositions import (
    filter_is_redundant,
    kept_for_folds,
    mark_preserved,
    stock_ops_to_not_decompose,
)
from xnnfold.passes.partition._facts import CrossMethodFacts
from xnnfold.passes.partition._rank import over_rank

__all__ = ["ConfigsFor", "PlanFor", "note_method", "ops_to_keep"]

# `aten_plan` with the partitioner's options and caches, for a program and its facts.
PlanFor = Callable[[ExportedProgram, ProgramFacts], AtenPlan]
# The partitioner's configs, built with the nodes kept undecomposed for a fold.
ConfigsFor = Callable[[frozenset[str]], Mapping[str, PartitionerConfig]]


def note_method(
    ep: ExportedProgram,
    tensors: Mapping[str, torch.Tensor],
    facts: CrossMethodFacts,
    *,
    asked: AskedConstants,
    plan: PlanFor,
    cache: AnalysisCache,
) -> None:
    """Add what the ATen program ``ep`` does with its constants ``tensors`` to ``facts``.

    to_edge_transform_and_lower asks every method's partitioners for
    ops_to_not_decompose before it partitions any method, so by partition time every
    method's writes and stored constants are known, whether the methods share a
    partitioner or each has its own (the facts are keyed by the tensors the methods share,
    which also keeps one model's facts from declining another model's constant of the same
    name).
    """
    written = set(ep.graph_signature.buffers_to_mutate.values())
    # This method's writes first: the plan below must see them.
    facts.note_method(tensors, written=written, stored=frozenset())
    # The plan sees this lowering's facts only (this method's writes, what the methods
    # asked so far store): its GEMMs that will not fold keep their sources, so another
    # method folding one of those sources would save nothing.
    not_folding = plan(ep, asked.program_facts(facts)).not_folding
    stored = stored_constants(ep, not_folding, cache=cache)
    facts.note_method(tensors, written=written, stored=stored)


def ops_to_keep(
    ep: ExportedProgram,
    facts: ProgramFacts,
    *,
    plan: Optional[PlanFor],
    configs_for: ConfigsFor,
    keep_filter: bool,
) -> tuple[list[OpOverload], Optional[Callable[[Node], bool]]]:
    """The stock ops and filter, plus the ops of the foldable weight computations
    ``plan`` keeps (None: folding is off), and a filter that marks each node it keeps.

    When the filter would accept every instance it could be shown (`filter_is_redundant`)
    and ``keep_filter`` is False, no filter is returned: executorch then keeps the ops
    without its two extra decomposition passes, and the program is the same.
    """
    preserved: dict[str, OpOverload] = {}
    if plan is not None:
        preserved = plan(ep, facts).preserved
    # The stock filter asks configs built with the facts known now, and with the nodes
    # this plan keeps (the filter marks them only as executorch asks about each). They
    # hold the partitioner's cache: executorch calls the filter during decomposition,
    # after the partitioner answered.
    ops, stock_filter = stock_ops_to_not_decompose(
        configs_for(frozenset(preserved) | kept_for_folds(ep)), ep
    )
    ops = [*ops, *sorted(set(preserved.values()) - set(ops), key=str)]
    graph = ep.graph

    def ours(node: Node) -> bool:
        # Names are unique per graph only: nodes of control-flow submodules may reuse them.
        return node.graph is graph and node.name in preserved

    def accepts(node: Node) -> bool:
        # A GEMM over XNNPACK's rank is not delegated (`within_xnnpack_rank`): kept
        # whole, it would have no kernel; decomposed, its 2D product is delegated.
        kept = ours(node) or (stock_filter is not None and stock_filter(node))
        return kept and not over_rank(node)

    def filter_fn(node: Node) -> bool:
        if ours(node):
            mark_preserved(node)
        return accepts(node)

    if not keep_filter and filter_is_redundant(ep, ops, accepts):
        for node in graph.nodes:
            if ours(node):
                mark_preserved(node)
        return ops, None
    return ops, filter_fn
