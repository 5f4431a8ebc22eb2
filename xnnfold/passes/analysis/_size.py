"""The size rules (XNF505-XNF508): a fold must not make the program larger than the
sources it frees, counting together the folds that share those sources."""

from __future__ import annotations

import dataclasses
from typing import Optional, Union

from torch.fx import Node

from xnnfold._meta import VAL_META_KEY
from xnnfold.passes._ops import FILL_OPS
from xnnfold.passes._reason_codes import (
    DYNAMIC_SHAPE,
    GROWS_PROGRAM,
    SHARED_NOT_FOLDED,
    SHARED_TOO_WIDE,
)
from xnnfold.passes.analysis._growth import Growth, node_bytes
from xnnfold.passes.analysis._nodes import op_overload, used_as_gemm_weight
from xnnfold.passes.analysis._results import Argument, Rejection
from xnnfold.passes.analysis._sharing import shared_component, SharingQuery

__all__ = ["size_rule"]


def _fill_op(node: Node) -> bool:
    op = op_overload(node.target)
    return op is not None and op.overloadpacket in FILL_OPS


def size_rule(
    *,
    arg: Argument,
    query: SharingQuery,
    closure: list[Node],
    nodes: tuple[Node, ...],
    site: Optional[str],
) -> Optional[Rejection]:
    """XNF505-XNF508: the folds that share these sources, taken together, must not make
    the program larger than the sources they free."""
    shared = _shared_folds(arg=arg, query=query, closure=closure, site=site)
    if isinstance(shared, Rejection):
        return shared
    folded_roots, freed_sources, kept_sources = shared
    folded = sum(node_bytes(r) or 0 for r in folded_roots)
    sizes = [node_bytes(s) for s in (*folded_roots, *freed_sources)]
    if any(b is None for b in sizes):
        return arg.reject(
            DYNAMIC_SHAPE, f"the {arg.role} has a dynamic shape", from_constants=True, site=site
        )
    # Floating-point sources are measured at the folded tensor's element size: an fp32
    # GEMM needs an fp32 weight, so `w_fp16.float()` folds to exactly what a hand-folded
    # model would store (twice the fp16 bytes); a float cast never counts as growth. An
    # integer source (`w_int8.float() * scale`) keeps its own size: that is compression,
    # for XNNPACK's quantized GEMMs rather than a 4x larger fp32 fold. Fill ops count as
    # sources (see FILL_OPS). What stays declined is growth in elements: a low-rank
    # product without its base weight, an expand()ed or repeat()ed kernel.
    itemsize = arg.root.meta[VAL_META_KEY].element_size()
    freed = sum(node_bytes(s, itemsize) or 0 for s in freed_sources) + sum(
        node_bytes(n, itemsize) or 0 for n in nodes if _fill_op(n)
    )
    if folded <= freed:
        return None
    return _grows_program(
        arg=arg,
        folded_roots=folded_roots,
        folded=folded,
        freed=freed,
        kept_sources=kept_sources,
        site=site,
    )


def _shared_folds(
    *, arg: Argument, query: SharingQuery, closure: list[Node], site: Optional[str]
) -> Union[tuple[list[Node], list[Node], list[Node]], Rejection]:
    """The folds sharing sources with ``closure`` (`shared_component`: the folded roots,
    the sources freed and the sources kept), or the rejection (XNF505, XNF506) when they
    are too many or one of them is not folded."""
    max_nodes = query.options.max_fold_nodes
    elsewhere = (
        frozenset(name for name, fqn in query.cmap.fqns.items() if fqn in query.stored_elsewhere)
        if query.stored_elsewhere
        else frozenset()
    )
    shared = shared_component(
        closure,
        query.cmap,
        limit=4 * max_nodes,
        ep=query.ep,
        stored_elsewhere=elsewhere,
        weight_only=query.weight_only,
        non_folding=query.non_folding,
    )
    if shared is None:
        return arg.reject(
            SHARED_TOO_WIDE,
            f"the {arg.role} shares its sources with more than {4 * max_nodes} nodes of "
            "other weight computations (raise max_fold_nodes to fold them)",
            from_constants=True,
            site=site,
        )
    if isinstance(shared, str):
        return arg.reject(
            SHARED_NOT_FOLDED,
            f"the {arg.role} computation reads {shared}, and that one is not folded: it "
            "also feeds something other than a GEMM weight",
            from_constants=True,
            site=site,
        )
    return shared


def _grows_program(
    *,
    arg: Argument,
    folded_roots: list[Node],
    folded: int,
    freed: int,
    kept_sources: list[Node],
    site: Optional[str],
) -> Rejection:
    """XNF508: the ``folded`` bytes exceed the ``freed`` ones; the rejection says which
    source keeps its bytes, and carries the growth for the budget."""
    if kept_sources:
        kept = kept_sources[0]
        where = (
            "a GEMM's stored weight"
            if any(used_as_gemm_weight(kept, user) for user in kept.users)
            else "stored for another method of the program"
        )
        why_not = f"source '{kept.name}' is also {where}, so folding frees nothing of it"
    else:
        why_not = f"its sources {freed} bytes"
    takes = (
        f"the {len(folded_roots)} folded weights sharing its sources take"
        if len(folded_roots) > 1
        else f"the folded {arg.role} takes"
    )
    rejection = arg.reject(
        GROWS_PROGRAM,
        f"folding would grow the program: {takes} {folded} bytes, {why_not}",
        from_constants=True,
        site=site,
    )
    return dataclasses.replace(rejection, growth=Growth(folded_roots[0].name, folded, freed))
