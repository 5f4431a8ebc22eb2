"""Where the per-program analysis is kept: one `ConstantMap` per program, in an
`AnalysisCache` that lives for one stage and is handed to every query of that stage.

A stage is one question asked of a program that nothing edits while it is answered: one
call executorch makes on the partitioner (its ATen plan, its configs and the
decomposition filter executorch calls after the answer, which judges the program as it
was asked about), one run of the fold pass before it rewrites. The owner starts a new
cache at each stage boundary, so a map is never checked against the graph it describes:
an edit between two questions (one node replaced by another, the count unchanged) is
seen by the next question because that question sweeps anew. No map outlives its stage's
owner, two concurrent lowerings never share one, and nothing reaches a query but its
arguments. A query asked with no cache sweeps into one of its own, which lasts for that
call (`own_cache`)."""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Optional

from torch.export import ExportedProgram

from xnnfold.passes.analysis._growth import Ledger

__all__ = [
    "AnalysisCache",
    "ConstantMap",
    "new_analysis_cache",
    "own_cache",
]


# The maps are keyed by node name, not by Node: a Node refers to its graph, so a value
# holding Nodes would keep its weak key (the program) alive and leak every program ever
# analysed.


@dataclass
class ConstantMap:
    """What one sweep of a program found (`_constants.constant_map`): valid for the stage
    that swept it, in which nothing edits the program."""

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


# One stage's constant maps, by program (its identity: `ExportedProgram` compares by id).
AnalysisCache = weakref.WeakKeyDictionary[ExportedProgram, ConstantMap]


def new_analysis_cache() -> AnalysisCache:
    """An empty cache: start one at each stage boundary."""
    return weakref.WeakKeyDictionary()


def own_cache(cache: Optional[AnalysisCache]) -> AnalysisCache:
    """``cache``, or a new one for a query asked without: a query that sweeps more than
    once then sweeps each graph once per call."""
    return new_analysis_cache() if cache is None else cache
