"""Where the per-graph analysis is kept: one `ConstantMap` per graph, in a cache its owner
holds and opens a scope for (`analysis_scope`), so no map outlives the lowering that
built it and two concurrent lowerings never share one."""

from __future__ import annotations

import contextlib
import functools
import weakref
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Callable, cast, Optional, TypeVar

from torch.fx import Graph

from xnnfold.passes.analysis._growth import Ledger

__all__ = [
    "AnalysisCache",
    "ConstantMap",
    "analysis_scope",
    "current_cache",
    "in_a_scope",
    "new_analysis_cache",
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


# The constant maps of one lowering, by graph. The partitioner and the fold pass each own
# one and open a scope for the calls they make, so no map outlives its owner and two
# concurrent lowerings never share one. Outside any scope, each public query that asks
# more than once opens its own (`in_a_scope`), so one call sweeps the graph once.
AnalysisCache = weakref.WeakKeyDictionary[Graph, ConstantMap]
_SCOPE: ContextVar[Optional[AnalysisCache]] = ContextVar("xnnfold_analysis", default=None)


def new_analysis_cache() -> AnalysisCache:
    return weakref.WeakKeyDictionary()


@contextlib.contextmanager
def analysis_scope(cache: AnalysisCache) -> Iterator[AnalysisCache]:
    """Make the predicate's queries inside the block read and fill ``cache``."""
    token = _SCOPE.set(cache)
    try:
        yield cache
    finally:
        _SCOPE.reset(token)


def current_cache() -> Optional[AnalysisCache]:
    """The cache of the innermost open scope, or None outside any."""
    return _SCOPE.get()


_F = TypeVar("_F", bound=Callable[..., Any])


def in_a_scope(function: _F) -> _F:
    """Run ``function`` in the caller's scope, or in a scope of its own when there is none."""

    @functools.wraps(function)
    def scoped(*args: Any, **kwargs: Any) -> Any:
        if _SCOPE.get() is not None:
            return function(*args, **kwargs)
        with analysis_scope(new_analysis_cache()):
            return function(*args, **kwargs)

    return cast(_F, scoped)
