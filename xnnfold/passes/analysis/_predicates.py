"""Decide whether a GEMM's weight or bias is a foldable computation of constants.

XNNPACK wants every GEMM weight to be a static tensor. A weight computed from parameters
(weight_norm, spectral_norm, `W.t()`, `w * scale`) is a constant too, just not yet
evaluated. `find_weight_computation` finds that computation and says whether folding it
is safe and does not grow the program; the partitioner configs and the fold pass both call
it, so "delegated" and "folded" can never disagree.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Optional, Union

from torch.export import ExportedProgram
from torch.fx import Node

from xnnfold.passes._graph_walk import post_order
from xnnfold.passes._ops import GEMM_ARGS
from xnnfold.passes._options import FoldOptions
from xnnfold.passes._reason_codes import EXTERNAL_DATA, RUN_TIME, TOO_MANY_NODES
from xnnfold.passes.analysis._cache import AnalysisCache, ConstantMap, own_cache
from xnnfold.passes.analysis._constants import constant_map, op_problem, weight_only_of
from xnnfold.passes.analysis._growth import (
    admit,
    growth_of,
    Ledger,
    program_bytes,
    restated_beyond_budget,
)
from xnnfold.passes.analysis._nodes import arg_role, external_tag, site_of
from xnnfold.passes.analysis._results import Argument, Growth, Rejection, WeightComputation
from xnnfold.passes.analysis._sharing import other_readers_rule, shared_nodes, SharingQuery
from xnnfold.passes.analysis._size import size_rule

__all__ = ["find_weight_computation"]


def find_weight_computation(
    gemm: Node,
    arg_index: int,
    ep: ExportedProgram,
    *,
    arg_positions: tuple[int, ...],
    options: FoldOptions,
    stored_elsewhere: frozenset[str] = frozenset(),
    non_folding: frozenset[str] = frozenset(),
    sharing: bool = True,
    cache: Optional[AnalysisCache] = None,
    budgeted: bool = True,
) -> Union[WeightComputation, Rejection, None]:
    """Find the computation behind ``gemm.args[arg_index]`` and check it can be folded.

    Pure: reads the graph and the program's signature, changes nothing.

    Args:
        gemm: a GEMM node (convolution, linear, addmm, mm or their ATen forms).
        arg_index: the argument to inspect (a weight or bias position).
        ep: the program that owns ``gemm``.
        arg_positions: the GEMM's (weight, bias) positions, to name the role.
        options: the partitioner's `FoldOptions` (the fold pass re-checks with the same).
        stored_elsewhere: FQNs of constants another method of the same program stores
            anyway (an embedding table one method looks up and another multiplies by):
            folding frees none of their bytes.
        non_folding: names of GEMMs the partitioner did not take with folded
            arguments; a source they read is not freed by folding another GEMM.
        sharing: apply the rules that keep the program small (other readers of the
            sources, shared intermediates, growth). Without them only the rules that
            make a fold wrong apply: what is left is correct to fold, the sources other
            readers need staying beside the folded value.
        cache: where the sweeps of ``ep``'s graph are kept (the caller's
            `AnalysisCache`); by default, one for this call.
        budgeted: False (the growth ledger measuring, or a survey of what folds would
            grow) declines every growing fold, the `Growth` it would add attached.

    Returns:
        None when the argument is absent or already a parameter (nothing to fold), a
        `WeightComputation` when folding is safe, otherwise a `Rejection` with the reason.
    """
    role = arg_role(arg_positions, arg_index)
    root = gemm.args[arg_index] if arg_index < len(gemm.args) else None
    if not isinstance(root, Node) or root.op == "placeholder":
        return None
    site = site_of(root)
    cache = own_cache(cache)
    cmap = constant_map(ep, cache=cache)
    arg = Argument(gemm=gemm, arg_index=arg_index, role=role, root=root)

    closure = _computation(arg=arg, cmap=cmap, options=options, site=site)
    if isinstance(closure, Rejection):
        return closure
    nodes = tuple(n for n in closure if n.op == "call_function")
    sources = tuple(n for n in closure if n.op == "placeholder")
    members = set(closure)
    if site is None:
        site = next((s for s in map(site_of, reversed(nodes)) if s), None)
    rejection = _external_data_rule(arg=arg, sources=sources, site=site)
    if rejection is not None:
        return rejection
    growth = None
    if sharing:
        weight_only = weight_only_of(ep, non_folding, cache=cache)
        query = SharingQuery(ep, options, stored_elsewhere, non_folding, cmap, weight_only, cache)
        rejection, growth = _program_size_rules(
            arg=arg,
            query=query,
            closure=closure,
            members=members,
            nodes=nodes,
            site=site,
            budgeted=budgeted,
        )
        if rejection is not None:
            return rejection
    shared = shared_nodes(nodes, root, members)
    return WeightComputation(gemm, arg_index, role, root, nodes, sources, site, shared, growth)


def _computation(
    *, arg: Argument, cmap: ConstantMap, options: FoldOptions, site: Optional[str]
) -> Union[list[Node], Rejection]:
    """The nodes that compute the argument, in post-order (the order the fold evaluates
    them in), or the rule that declines it before its size is known (XNF501, XNF502)."""
    rejection = _run_time_rule(arg=arg, cmap=cmap, site=site)
    if rejection is not None:
        return rejection
    closure = post_order(arg.root, lambda node: node.all_input_nodes, limit=options.max_fold_nodes)
    if closure is None:
        return _too_many_nodes(arg=arg, options=options, site=site)
    return _walked_nodes_rule(arg=arg, closure=closure, cmap=cmap, site=site) or closure


# The predicate's rules, in the order they apply. Each sees what the ones before it
# established and returns the `Rejection` that decides, or None.


def _run_time_rule(*, arg: Argument, cmap: ConstantMap, site: Optional[str]) -> Optional[Rejection]:
    """XNF501: the argument is not computed from constants alone."""
    if cmap.constant.get(arg.root.name, False):
        return None
    problem = cmap.culprit.get(arg.root.name, "it is not a constant")
    return arg.reject(
        RUN_TIME,
        f"the {arg.role} is computed at run time: {problem}",
        from_constants=False,
        site=site,
    )


def _too_many_nodes(*, arg: Argument, options: FoldOptions, site: Optional[str]) -> Rejection:
    """XNF502: the computation is larger than ``max_fold_nodes`` (the walk stopped)."""
    return arg.reject(
        TOO_MANY_NODES,
        f"the {arg.role} computation has more than {options.max_fold_nodes} nodes "
        "(raise max_fold_nodes to fold it)",
        from_constants=True,
        site=site,
    )


def _walked_nodes_rule(
    *, arg: Argument, closure: list[Node], cmap: ConstantMap, site: Optional[str]
) -> Optional[Rejection]:
    """XNF501 again, node by node over the walked computation.

    The constant map is kept for a stage in which nothing edits the program; a caller
    that edits it within one (an argument or a target replaced in place) and asks again
    with the same cache reads a stale map. The nodes walked are re-checked here, so a
    stale map can only decline a fold, never fold something computed at run time.
    """
    for node in closure:
        if node.op == "placeholder":
            problem = (
                None
                if cmap.constant.get(node.name, False)
                else (f"'{node.name}' is not a constant")
            )
        elif node.op == "call_function":
            problem = op_problem(node)
        else:
            problem = f"'{node.name}' is a {node.op} node"
        if problem is not None:
            return arg.reject(
                RUN_TIME,
                f"the {arg.role} is computed at run time: {problem}",
                from_constants=False,
                site=site,
            )
    return None


def _external_data_rule(
    *, arg: Argument, sources: tuple[Node, ...], site: Optional[str]
) -> Optional[Rejection]:
    """XNF503: a source tagged for an external .ptd file is data the user means to keep
    outside the program (and to swap without re-exporting); a fold would bake its current
    value into a new tensor, so the source stays external and the GEMM stays as it is."""
    for source in sources:
        tag = external_tag(source)
        if tag is not None:
            return arg.reject(
                EXTERNAL_DATA,
                f"source '{source.name}' of the {arg.role} computation is stored in the "
                f"external data file '{tag}'",
                from_constants=True,
                site=site,
                keep_stock=True,
            )
    return None


def _program_size_rules(
    *,
    arg: Argument,
    query: SharingQuery,
    closure: list[Node],
    members: set[Node],
    nodes: tuple[Node, ...],
    site: Optional[str],
    budgeted: bool,
) -> tuple[Optional[Rejection], Optional[Growth]]:
    """XNF504 to XNF508, then the growth budget (XNF516): the rules that keep the program
    small. Returns the rejection that decides, and the growth the fold adds (a growing
    fold the budget admits folds with it)."""
    rejection = other_readers_rule(
        arg=arg, query=query, closure=closure, members=members, site=site
    ) or size_rule(arg=arg, query=query, closure=closure, nodes=nodes, site=site)
    if rejection is None:
        return None, None
    growth = rejection.growth
    if budgeted and growth_of(rejection) is not None:
        # The ledger is built only once a fold the budget may admit is asked about.
        ledger = _ledger(query, query.cmap.ledgers)
        return restated_beyond_budget(rejection, ledger), growth
    return rejection, growth


def _ledger(query: SharingQuery, ledgers: dict[object, Ledger]) -> Ledger:
    """The growth budget's verdicts on the query's program: every growing fold of its
    GEMMs that may spend budget, in program order, measured by the predicate without the
    budget and admitted (`admit`). Built once per options and facts, kept in ``ledgers``
    (the method's constant map), so every GEMM asked about reads the same verdicts."""
    ep, options, stored_elsewhere = query.ep, query.options, query.stored_elsewhere
    key = (options, stored_elsewhere)
    ledger = ledgers.get(key)
    if ledger is not None:
        return ledger

    def growths() -> Iterator[Growth]:
        for gemm in ep.graph.nodes:
            positions = GEMM_ARGS.get(gemm.target) if gemm.op == "call_function" else None
            if positions is None:
                continue
            for index in positions:
                growth = growth_of(
                    find_weight_computation(
                        gemm,
                        index,
                        ep,
                        arg_positions=positions,
                        options=options,
                        stored_elsewhere=stored_elsewhere,
                        cache=query.cache,
                        budgeted=False,
                    )
                )
                if growth is not None:
                    yield growth

    ledger = ledgers[key] = admit(growths(), options.growth_budget, program_bytes(ep))
    return ledger
