"""Where the per-graph analysis is kept: one `ConstantMap` per graph, in an `AnalysisCache`
its owner holds and hands to every query it asks (the partitioner to its ATen plan, its
configs and the decomposition filter executorch calls later; the fold pass to its own
queries). So no map outlives its owner, two concurrent lowerings never share one, and
nothing reaches a query but its arguments. A query asked with no cache sweeps into one of
its own, which lasts for that call (`own_cache`)."""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Optional

from torch.fx import Graph

from xnnfold.passes.analysis._growth import Ledger

__all__ = [
    "AnalysisCache",
    "ConstantMap",
    "new_analysis_cache",
    "own_cache",
]


# The maps are keyed by node name, not by Node: a Node refers to its graph, so a value
# holding Nodes would keep its weak key alive and leak every graph ever analysed.


@dataclass
class ConstantMap:
    """What one sweep of a graph found (`_constants.constant_map`), valid while the graph
    keeps its node count and its signature object."""

    node_count: int
    signature: object
    constant: dict[str, bool]
    culprit: dict[str, str]
    # Constant nodes whose every use ends in GEMM weights or biases: a source shared only
    # by such uses (a packed in_proj split three ways, a module called twice) is freed
    # once every GEMM that reads it is folded.
    weight_only: dict[str, bool]
    # Topological position of every node, for ordering what a query collects without
    # enumerating the whole graph per query.
    order: dict[str, int]
    # Placeholder name -> FQN of every constant input (`constant_fqns`).
    fqns: dict[str, str]
    # `weight_only` when some GEMMs do not fold (see `weight_only_of`).
    weight_only_without: dict[frozenset[str], dict[str, bool]] = field(default_factory=dict)
    # The growth budget's verdicts (`_growth.Ledger`), by options and stored_elsewhere.
    ledgers: dict[object, Ledger] = field(default_factory=dict)


# The constant maps of one owner (a partitioner, a fold pass), by graph.
AnalysisCache = weakref.WeakKeyDictionary[Graph, ConstantMap]


def new_analysis_cache() -> AnalysisCache:
    return weakref.WeakKeyDictionary()


def own_cache(cache: Optional[AnalysisCache]) -> AnalysisCache:
    """``cache``, or a new one for a query asked without: a query that sweeps more than
    once then sweeps each graph once per call."""
    return new_analysis_cache() if cache is None else cache
