"""The rules for weight computations that share sources or intermediates with others.

Folding replaces a computation by one constant. Another reader of what it reads keeps
that alive beside the folded value, unless the reader is itself a GEMM weight computed
from the same sources (a packed projection split per GEMM, a module called twice): those
fold together, and are judged together (`shared_component`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Optional, Union

from torch.export import ExportedProgram
from torch.fx import Node

from xnnfold.passes._graph_walk import walk
from xnnfold.passes._options import FoldOptions
from xnnfold.passes._reason_codes import OTHER_READER
from xnnfold.passes.analysis._cache import AnalysisCache, ConstantMap
from xnnfold.passes.analysis._nodes import readers, used_as_gemm_weight
from xnnfold.passes.analysis._results import Argument, Rejection
from xnnfold.passes.analysis._structure import structure

__all__ = ["SharingQuery", "other_readers_rule", "shared_component", "shared_nodes"]


@dataclass(frozen=True)
class SharingQuery:
    """What the rules that keep the program small read besides the argument judged.

    Attributes:
        ep: the program that owns the GEMM.
        options: the `FoldOptions` the predicate was called with.
        stored_elsewhere: FQNs of constants another method stores anyway.
        non_folding: names of GEMMs that do not fold their arguments.
        cmap: the method's constant map.
        weight_only: `ConstantMap.weight_only` with ``non_folding`` counted as readers.
        cache: where ``cmap`` is kept, for the queries the rules ask in turn.
    """

    ep: ExportedProgram
    options: FoldOptions
    stored_elsewhere: frozenset[str]
    non_folding: frozenset[str]
    cmap: ConstantMap
    weight_only: dict[str, bool]
    cache: AnalysisCache


def shared_component(
    closure: list[Node],
    cmap: ConstantMap,
    *,
    limit: int,
    ep: Optional[ExportedProgram] = None,
    stored_elsewhere: frozenset[str] = frozenset(),
    weight_only: Optional[dict[str, bool]] = None,
    non_folding: frozenset[str] = frozenset(),
) -> Union[tuple[list[Node], list[Node], list[Node]], str, None]:
    """The weight computations that share sources with ``closure``, taken together.

    Returns (folded roots, one per distinct computation; sources freed once all of them
    are folded; sources kept because a GEMM also reads them as a stored weight), None
    when the component has more than ``limit`` nodes, or the name of a shared node that
    also feeds something besides GEMM weights. Without sharing this is just
    ([root], sources, []). Sources named in ``stored_elsewhere`` (placeholder names whose
    tensor another method of the program stores anyway) are kept, never freed.
    """
    weight_only = cmap.weight_only if weight_only is None else weight_only

    def neighbours(node: Node) -> list[Node]:
        return [
            *node.all_input_nodes,
            *(u for u in node.users if u.op == "call_function" and weight_only.get(u.name)),
        ]

    # The closure itself is within the bound (max_fold_nodes <= limit), so only what the
    # walk adds can take the component over it.
    seen = set(itertools.islice(walk(closure, neighbours), limit + 1))
    if len(seen) > limit:
        return None

    def position(node: Node) -> int:
        return cmap.order[node.name]

    roots: list[Node] = []
    kept: list[Node] = []
    freed: list[Node] = []
    # In program order, so the shared node a rejection names is the same on every run.
    in_order = sorted(seen, key=position)
    for node in in_order:
        if not weight_only.get(node.name, False):
            # Shared with a computation that stays in the program (it also feeds something
            # other than GEMM weights): folding the rest would store its sources twice.
            return f"'{node.name}', which it shares with another weight computation"
        # A GEMM whose own result is only ever a weight (the `A @ B` of a low-rank
        # weight) is part of the computation, not a reader of a stored weight.
        as_weight = any(
            used_as_gemm_weight(node, u, non_folding) and not weight_only.get(u.name, False)
            for u in node.users
        )
        if node.op == "placeholder":
            (kept if as_weight or node.name in stored_elsewhere else freed).append(node)
        elif as_weight:
            roots.append(node)
    # Equal computations fold to equal bytes, which the program stores once.
    memo: dict[Node, object] = {}
    distinct: dict[object, Node] = {}
    for node in in_order:
        key = structure(node, memo, (ep, cmap) if ep is not None else None)
        if node in roots:
            distinct.setdefault(key, node)
    by_order = sorted(distinct.values(), key=position)
    return by_order, sorted(freed, key=position), sorted(kept, key=position)


def other_readers_rule(
    *,
    arg: Argument,
    query: SharingQuery,
    closure: list[Node],
    members: set[Node],
    site: Optional[str],
) -> Optional[Rejection]:
    """XNF504: folding replaces the whole computation by one constant; anything else that
    reads a source or an intermediate would keep it alive, and the program would store
    both. The one exception is another GEMM weight or bias computed from the same sources
    (a packed projection split per GEMM, a module called twice): those fold too."""
    role, root = arg.role, arg.root
    for node in closure:
        for user in readers(node):
            if user in members or user is arg.gemm:
                continue
            if used_as_gemm_weight(node, user, query.non_folding) or (
                user.op == "call_function" and query.weight_only.get(user.name, False)
            ):
                continue
            what = (
                "computed " + role
                if node is root
                else "source"
                if node.op == "placeholder"
                else "intermediate"
            )
            return arg.reject(
                OTHER_READER,
                f"{what} '{node.name}' of the {role} computation is also used by "
                f"'{user.name}', which is not a GEMM weight",
                from_constants=True,
                site=site,
            )
    return None


def shared_nodes(nodes: tuple[Node, ...], root: Node, members: set[Node]) -> tuple[Node, ...]:
    """The intermediates of a computation that something outside it also reads."""
    return tuple(n for n in nodes if n is not root and any(u not in members for u in n.users))
