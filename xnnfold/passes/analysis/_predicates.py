"""Decide whether a GEMM's weight or bias is a foldable computation of constants.

XNNPACK wants every GEMM weight to be a static tensor. A weight computed from parameters
(weight_norm, spectral_norm, `W.t()`, `w * scale`) is a constant too, just not yet
evaluated. `find_weight_computation` finds that computation and says whether folding it
is safe and does not grow the program; the partitioner configs and the fold pass both call
it, so "delegated" and "folded" can never disagree.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import weakref
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Callable, cast, Optional, TypeVar, Union

import torch
from executorch.exir.delegate import executorch_call_delegate
from torch.export import ExportedProgram
from torch.fx import Graph, Node
from torch.fx.experimental.symbolic_shapes import free_symbols

from xnnfold._meta import (
    CUSTOM_META_KEY,
    EXTERNAL_TAG_KEYS,
    PRESERVED_META_KEY,
    SITE_META_KEY,
    VAL_META_KEY,
)
from xnnfold._upstream import (
    aten_op_of,
    EdgeOpOverload,
    is_fake,
    OpOverload,
    overload_name_of,
    real_value_of_fake,
    schema_of,
    unset_fake_temporarily,
)
from xnnfold.passes._codes import (
    DYNAMIC_SHAPE,
    EXTERNAL_DATA,
    GROWS_PROGRAM,
    OTHER_READER,
    ReasonCode,
    RUN_TIME,
    SHARED_NOT_FOLDED,
    SHARED_TOO_WIDE,
    TOO_MANY_NODES,
)
from xnnfold.passes._ops import (
    ASSERTION_OPS,
    EDGE_NO_DECOMP_NAMESPACE,
    FILL_OPS,
    FOLDABLE_NAMESPACES,
    GEMM_ARGS,
    GETITEM,
    SYMBOLIC_SCALAR_OPS,
    UNFOLDABLE_OPS,
)
from xnnfold.passes._options import FoldOptions
from xnnfold.passes._walk import post_order, walk
from xnnfold.passes.analysis._growth import beyond_budget, Growth, Ledger, node_bytes
from xnnfold.passes.analysis._growth import node_bytes as value_bytes

__all__ = [
    "AnalysisCache",
    "WeightComputation",
    "Rejection",
    "analysis_scope",
    "arg_role",
    "constant_fqns",
    "computation_key",
    "external_tag",
    "find_weight_computation",
    "gemm_positions",
    "is_gemm",
    "is_constant_node",
    "is_constant_source",
    "is_float32",
    "is_preserved",
    "op_overload",
    "site_of",
    "stored_constants",
    "new_analysis_cache",
    "value_bytes",
]


@dataclass(frozen=True)
class WeightComputation:
    """A GEMM argument computed from constants, ready to fold.

    Attributes:
        gemm: the GEMM node that consumes the computed tensor.
        arg_index: position of the computed tensor in ``gemm.args``.
        role: ``"weight"`` or ``"bias"``.
        root: the node whose value the GEMM consumes.
        nodes: the computation's call_function nodes in topological order (root last).
        sources: the parameter, buffer and constant placeholders it reads.
        site: the ``prepare_for_xnnpack`` mark (``"<module path>.<tensor>"``), if any.
        shared: intermediates it shares with other GEMMs' weight computations (the
            split of a packed projection); those GEMMs must share its partition.
    """

    gemm: Node
    arg_index: int
    role: str
    root: Node
    nodes: tuple[Node, ...]
    sources: tuple[Node, ...]
    site: Optional[str]
    shared: tuple[Node, ...] = ()
    # What the fold adds to the program, when it grows it (within the growth budget).
    growth: Optional[Growth] = None


@dataclass(frozen=True)
class Rejection:
    """Why a GEMM argument is not folded.

    ``computed_from_constants`` is True when the argument *is* computed from parameters
    only and was declined for safety (sharing, size, budget): that is the case a user
    wants to hear about, as opposed to a GEMM whose weight is an activation.
    """

    gemm: Node
    arg_index: int
    role: str
    reason: str
    computed_from_constants: bool
    site: Optional[str]
    # The rule that decided (XNF5xx, docs/reasons.md).
    code: ReasonCode
    # True when the GEMM must stay exactly as the stock partitioner leaves it (its
    # sources live in an external .ptd): no run-time-weight delegation either.
    keep_stock: bool = False
    # What folding would add to the program (XNF508, XNF516).
    growth: Optional[Growth] = None


def op_overload(target: object) -> Optional[OpOverload]:
    """The ATen-level OpOverload behind an ATen or edge-dialect target, else None."""
    if isinstance(target, EdgeOpOverload):
        return aten_op_of(target)
    if isinstance(target, OpOverload):
        if target.namespace == EDGE_NO_DECOMP_NAMESPACE:
            # While to_edge decomposes, the ops it keeps are copies in their own namespace;
            # the partitioner's checks run on that graph and must see the ATen op.
            packet = getattr(torch.ops.aten, schema_of(target).name.split("::")[-1], None)
            aten_op = getattr(packet, overload_name_of(target), None) if packet else None
            return aten_op if isinstance(aten_op, OpOverload) else target
        return target
    return None


def is_preserved(node: Node) -> bool:
    """True when the partitioner asked executorch to keep ``node``'s op undecomposed."""
    custom = node.meta.get(CUSTOM_META_KEY)
    return isinstance(custom, dict) and bool(custom.get(PRESERVED_META_KEY))


def site_of(node: Node) -> Optional[str]:
    """The ``prepare_for_xnnpack`` mark carried by ``node``, if any."""
    custom = node.meta.get(CUSTOM_META_KEY)
    if isinstance(custom, dict):
        site = custom.get(SITE_META_KEY)
        if isinstance(site, str):
            return site
    return None


def arg_role(arg_positions: tuple[int, ...], arg_index: int) -> str:
    """The first GEMM argument position is the weight, the second the bias."""
    return "weight" if arg_positions.index(arg_index) == 0 else "bias"


# --------------------------------------------------------------------------------------
# Which nodes hold a compile-time constant value.
#
# One forward sweep over the graph classifies every node, so asking about many GEMMs costs
# O(graph) in total rather than one backward walk to the inputs per GEMM (a transformer has
# hundreds of activation-by-activation matmuls whose walks would otherwise be quadratic).
# For every non-constant node the sweep also records what made it so, which becomes the
# user-visible reason.
#
# The maps are keyed by node name, not by Node: a Node refers to its graph, so a value
# holding Nodes would keep its weak key alive and leak every graph ever analysed.


@dataclass
class _ConstantMap:
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
    # `weight_only` when some GEMMs do not fold (see `_weight_only`).
    weight_only_without: dict[frozenset[str], dict[str, bool]] = field(default_factory=dict)
    # The growth budget's verdicts (`_growth.Ledger`), by options and stored_elsewhere.
    ledgers: dict[object, Ledger] = field(default_factory=dict)


# The constant maps of one lowering, by graph. The partitioner and the fold pass each own
# one and open a scope for the calls they make, so no map outlives its owner and two
# concurrent lowerings never share one. Outside any scope, each public query that asks
# more than once opens its own (`_in_a_scope`), so one call sweeps the graph once.
AnalysisCache = weakref.WeakKeyDictionary[Graph, _ConstantMap]
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


_F = TypeVar("_F", bound=Callable[..., Any])


def _in_a_scope(function: _F) -> _F:
    """Run ``function`` in the caller's scope, or in a scope of its own when there is none."""

    @functools.wraps(function)
    def scoped(*args: Any, **kwargs: Any) -> Any:
        if _SCOPE.get() is not None:
            return function(*args, **kwargs)
        with analysis_scope(new_analysis_cache()):
            return function(*args, **kwargs)

    return cast(_F, scoped)


@dataclass(frozen=True)
class _SignatureIndex:
    """The signature's input lookups, built once per sweep.

    ``is_param(ep, node)`` and friends rebuild ``inputs_to_parameters`` (a dict over every
    input) on each call, which made one sweep quadratic in the number of inputs: most of
    the lowering time of a 200-layer weight_norm chain went there.
    """

    constants: frozenset[str]
    buffers: dict[str, str]
    mutated: frozenset[str]

    @classmethod
    def of(cls, ep: ExportedProgram) -> _SignatureIndex:
        signature = ep.graph_signature
        return cls(
            frozenset(signature.inputs_to_parameters)
            | frozenset(signature.inputs_to_lifted_tensor_constants),
            dict(signature.inputs_to_buffers),
            frozenset(signature.buffers_to_mutate.values()),
        )


def _source_problem(index: _SignatureIndex, node: Node) -> Optional[str]:
    if node.name in index.constants:
        return None
    if node.name in index.buffers:
        if node.name in index.mutated or index.buffers[node.name] in index.mutated:
            return f"buffer '{node.name}' is written by the program"
        return None
    return f"'{node.name}' is a runtime input"


def constant_fqns(ep: ExportedProgram) -> dict[str, str]:
    """Placeholder name -> state_dict / constants key of every constant input."""
    signature = ep.graph_signature
    return {
        **signature.inputs_to_parameters,
        **signature.inputs_to_buffers,
        **signature.inputs_to_lifted_tensor_constants,
    }


def external_tag(node: Node) -> Optional[str]:
    """The external data file (``.ptd``) tag ``node`` is stored under, if any."""
    for meta_key, tag_key in EXTERNAL_TAG_KEYS:
        meta = node.meta.get(meta_key) if meta_key is not None else node.meta
        tag = meta.get(tag_key) if isinstance(meta, dict) else None
        if tag is not None:
            return str(tag)
    return None


def _op_problem(node: Node) -> Optional[str]:
    if node.target is GETITEM or node.target in SYMBOLIC_SCALAR_OPS:
        return None
    if node.target is executorch_call_delegate:
        # An earlier partitioner in the list took this part of the computation; its
        # delegate runs at run time and cannot be folded into a later one.
        return f"'{node.name}' is computed by an earlier partitioner's delegate"
    op = op_overload(node.target)
    if op is None:
        return f"'{node.name}' calls {node.target}, which is not an ATen op"
    if op.namespace not in FOLDABLE_NAMESPACES:
        return f"'{node.name}' calls {op}, which is not a pure ATen op"
    if schema_of(op).is_mutable:
        return f"'{node.name}' calls {op}, which mutates its inputs"
    if torch.Tag.nondeterministic_seeded in op.tags:
        return f"'{node.name}' calls {op}, which is random"
    if op in UNFOLDABLE_OPS:
        return f"'{node.name}' calls {op}, whose value is not a function of its inputs"
    val = node.meta.get(VAL_META_KEY)
    vals = val if isinstance(val, (tuple, list)) else (val,)
    for v in vals:
        if isinstance(v, torch.Tensor) and free_symbols(v):
            return f"'{node.name}' has a shape that depends on the inputs"
    return None


def gemm_positions(node: Node) -> Optional[tuple[int, ...]]:
    """The weight and bias positions of a GEMM (ATen or edge; empty for a product of two
    activations), or None when ``node`` is not one."""
    if node.op != "call_function":
        return None
    return GEMM_ARGS.get(node.target)


def is_gemm(node: Node) -> bool:
    return gemm_positions(node) is not None


def _used_as_gemm_weight(
    value: Node, user: Node, non_folding: frozenset[str] = frozenset()
) -> bool:
    """True when ``user`` is a GEMM that reads ``value`` only as its weight or bias (and
    is not one of ``non_folding``, GEMMs the partitioner took without folding their
    arguments, or not at all: those read a computed weight like any other op)."""
    positions = gemm_positions(user)
    if positions is None or value in user.kwargs.values() or user.name in non_folding:
        return False
    uses = [i for i, arg in enumerate(user.args) if arg is value]
    return bool(uses) and all(i in positions for i in uses)


def _readers(node: Node) -> list[Node]:
    """``node``'s users that use its value: not the checks torch.export records on a
    tensor (`ASSERTION_OPS`), which store nothing and which to_edge removes."""
    return [user for user in node.users if user.target not in ASSERTION_OPS]


def _op_identity(target: object) -> object:
    """ "_weight_norm.default" for the ATen op, its edge wrapper, and the copy executorch
    keeps out of decomposition under another namespace while it decomposes the rest."""
    op = op_overload(target)
    if op is None:
        return target
    return (schema_of(op).name.split("::")[-1], overload_name_of(op))


# Lifted constants this small are compared by value: each call of a module lifts its own
# copy of a scalar like the 0.5 in ``bias * 0.5``, under a new name.
_MAX_VALUE_KEY_NUMEL = 64


def _small_constant(ep: ExportedProgram, node: Node) -> Optional[torch.Tensor]:
    val = node.meta.get(VAL_META_KEY)
    if not isinstance(val, torch.Tensor) or val.numel() > _MAX_VALUE_KEY_NUMEL:
        return None
    # Scalars lifted by to_edge are non-persistent buffers; either way, only values the
    # program never writes can stand for each other (the per-graph sweep knows which).
    cmap = _constant_map(ep)
    if not cmap.constant.get(node.name, False):
        return None
    # The sweep's snapshot of the signature: torch's is_buffer/get_buffer rebuild the
    # name -> FQN dicts per call, quadratic over a chain of thousands of lifted scalars.
    fqn = cmap.fqns.get(node.name)
    value = None if fqn is None else ep.constants.get(fqn, ep.state_dict.get(fqn))
    if isinstance(value, torch.Tensor) and is_fake(value):
        # Under a decomposition's fake mode a small constant keeps its real value here.
        value = real_value_of_fake(value)
    return value if isinstance(value, torch.Tensor) and not is_fake(value) else None


def _value_key(value: torch.Tensor) -> tuple[object, ...]:
    # Read outside any fake mode the caller (a decomposition) may have active.
    with unset_fake_temporarily():
        items = tuple(value.detach().flatten().tolist())
    return ("value", str(value.dtype), tuple(value.shape), items)


def _structure(
    node: Node, memo: dict[Node, object], ep: Optional[ExportedProgram] = None
) -> object:
    """A hashable description of what ``node`` computes from which sources: two weight
    computations with the same structure fold to the same bytes, stored once."""
    if node in memo:
        return memo[node]
    if node.op == "placeholder":
        value = _small_constant(ep, node) if ep is not None else None
        key: object = _value_key(value) if value is not None else ("source", node.name)
    else:

        def describe(arg: object) -> object:
            if isinstance(arg, Node):
                return _structure(arg, memo, ep)
            if isinstance(arg, (list, tuple)):
                return tuple(describe(a) for a in arg)
            if isinstance(arg, dict):
                return tuple(sorted((k, describe(v)) for k, v in arg.items()))
            try:
                hash(arg)
            except TypeError:
                return repr(arg)
            return (type(arg).__name__, arg)

        key = (_op_identity(node.target), describe(node.args), describe(node.kwargs))
    memo[node] = key
    return key


def _weight_only_sweep(
    graph: Graph, constant: dict[str, bool], non_folding: frozenset[str]
) -> dict[str, bool]:
    weight_only: dict[str, bool] = {}
    for node in reversed(graph.nodes):
        users = _readers(node)
        weight_only[node.name] = (
            constant[node.name]
            and bool(users)
            and all(
                _used_as_gemm_weight(node, user, non_folding)
                or (user.op == "call_function" and weight_only.get(user.name, False))
                for user in users
            )
        )
    return weight_only


def _weight_only(ep: ExportedProgram, non_folding: frozenset[str]) -> dict[str, bool]:
    """`_ConstantMap.weight_only`, with the GEMMs in ``non_folding`` counted as readers
    that keep what they read (one more sweep per distinct set, cached with the map)."""
    cmap = _constant_map(ep)
    if not non_folding:
        return cmap.weight_only
    cached = cmap.weight_only_without.get(non_folding)
    if cached is None:
        cached = cmap.weight_only_without[non_folding] = _weight_only_sweep(
            ep.graph, cmap.constant, non_folding
        )
    return cached


def _constant_map(ep: ExportedProgram) -> _ConstantMap:
    graph = ep.graph
    cache = _SCOPE.get()
    cached = cache.get(graph) if cache is not None else None
    if (
        cached is not None
        and cached.node_count == len(graph.nodes)
        and cached.signature is ep.graph_signature
    ):
        return cached
    constant: dict[str, bool] = {}
    culprit: dict[str, str] = {}
    index = _SignatureIndex.of(ep)
    for node in graph.nodes:
        if node.op == "placeholder":
            problem = _source_problem(index, node)
        elif node.op == "call_function":
            problem = _op_problem(node)
            if problem is None:
                for inp in node.all_input_nodes:
                    if not constant.get(inp.name, False):
                        culprit[node.name] = culprit.get(
                            inp.name, f"'{inp.name}' is not a constant"
                        )
                        break
        else:
            problem = f"'{node.name}' is a {node.op} node"
        if problem is not None:
            culprit[node.name] = problem
        constant[node.name] = node.name not in culprit
    weight_only = _weight_only_sweep(graph, constant, frozenset())
    order = {node.name: i for i, node in enumerate(graph.nodes)}
    result = _ConstantMap(
        len(graph.nodes),
        ep.graph_signature,
        constant,
        culprit,
        weight_only,
        order,
        constant_fqns(ep),
    )
    if cache is not None:
        cache[graph] = result
    return result


def is_constant_node(ep: ExportedProgram, node: Node) -> bool:
    """True when ``node``'s value is computed from constants alone (the per-graph sweep)."""
    return _constant_map(ep).constant.get(node.name, False)


def is_constant_source(
    ep: ExportedProgram, node: Node, written_buffers: Optional[set[str] | frozenset[str]] = None
) -> bool:
    """True when placeholder ``node`` is a parameter, a constant, or a buffer that
    neither this program nor another method (``written_buffers``, by FQN) writes."""
    if node.op != "placeholder" or not _constant_map(ep).constant.get(node.name, False):
        return False
    fqn = ep.graph_signature.inputs_to_buffers.get(node.name)
    return not (fqn is not None and written_buffers and fqn in written_buffers)


def is_float32(value: object) -> bool:
    """Whether ``value`` is a node whose value is an fp32 tensor."""
    val = value.meta.get(VAL_META_KEY) if isinstance(value, Node) else None
    return isinstance(val, torch.Tensor) and val.dtype == torch.float32


def stored_constants(
    ep: ExportedProgram, non_folding: frozenset[str] = frozenset()
) -> frozenset[str]:
    """FQNs of the constants ``ep`` stores whatever xnnfold folds.

    A constant is stored when something reads it other than a computation that only
    feeds GEMM weights and biases: an embedding lookup, an elementwise op on the
    activations, a GEMM that takes it directly as its weight, or the computed weight or
    bias of a GEMM in ``non_folding`` (one that will not fold: declined for its
    arguments or its computation, or one no edge config folds). Another method that
    folds a computation of such a constant frees none of its bytes.
    """
    cmap = _constant_map(ep)
    fqns = cmap.fqns
    weight_only = _weight_only(ep, non_folding)
    stored: set[str] = set()
    for node in ep.graph.nodes:
        if node.op != "placeholder" or node.name not in fqns:
            continue
        if any(
            # A GEMM whose own result only feeds weights (the `A @ B` of a low-rank
            # weight) is part of a computation, not a reader of a stored weight.
            not (user.op == "call_function" and weight_only.get(user.name, False))
            for user in _readers(node)
        ):
            stored.add(fqns[node.name])
    return frozenset(stored)


def _fill_op(node: Node) -> bool:
    op = op_overload(node.target)
    return op is not None and op.overloadpacket in FILL_OPS


def _shared_component(
    closure: list[Node],
    cmap: _ConstantMap,
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
            _used_as_gemm_weight(node, u, non_folding) and not weight_only.get(u.name, False)
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
        key = _structure(node, memo, ep)
        if node in roots:
            distinct.setdefault(key, node)
    by_order = sorted(distinct.values(), key=position)
    return by_order, sorted(freed, key=position), sorted(kept, key=position)


@_in_a_scope
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
    _budgeted: bool = True,
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
        _budgeted: False (the growth ledger measuring) declines every growing fold.

    Returns:
        None when the argument is absent or already a parameter (nothing to fold), a
        `WeightComputation` when folding is safe, otherwise a `Rejection` with the reason.
    """
    role = arg_role(arg_positions, arg_index)
    root = gemm.args[arg_index] if arg_index < len(gemm.args) else None
    if not isinstance(root, Node) or root.op == "placeholder":
        return None
    site = site_of(root)
    cmap = _constant_map(ep)
    arg = _Argument(gemm=gemm, arg_index=arg_index, role=role, root=root)

    rejection = _run_time_rule(arg=arg, cmap=cmap, site=site)
    if rejection is not None:
        return rejection
    # Post-order: the fold evaluates the computation in this order.
    closure = post_order(root, lambda node: node.all_input_nodes, limit=options.max_fold_nodes)
    if closure is None:
        return arg.reject(
            TOO_MANY_NODES,
            f"the {role} computation has more than {options.max_fold_nodes} nodes "
            "(raise max_fold_nodes to fold it)",
            from_constants=True,
            site=site,
        )
    rejection = _walked_nodes_rule(arg=arg, closure=closure, cmap=cmap, site=site)
    if rejection is not None:
        return rejection
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
        weight_only = _weight_only(ep, non_folding)
        rejection = _other_readers_rule(
            arg=arg,
            closure=closure,
            members=members,
            weight_only=weight_only,
            non_folding=non_folding,
            site=site,
        ) or _size_rule(
            arg=arg,
            ep=ep,
            closure=closure,
            nodes=nodes,
            cmap=cmap,
            options=options,
            stored_elsewhere=stored_elsewhere,
            weight_only=weight_only,
            non_folding=non_folding,
            site=site,
        )
        growth = rejection.growth if rejection is not None else None
        if rejection is not None and _budgeted:
            rejection = beyond_budget(
                rejection, ep, options, stored_elsewhere, cmap.ledgers, find_weight_computation
            )
        if rejection is not None:
            return rejection
    shared_nodes = _shared_nodes(nodes, root, members)
    return WeightComputation(
        gemm, arg_index, role, root, nodes, sources, site, shared_nodes, growth
    )


# The predicate's rules, in the order they apply. Each sees what the ones before it
# established and returns the `Rejection` that decides, or None.


@dataclass(frozen=True)
class _Argument:
    """The GEMM argument a rule judges."""

    gemm: Node
    arg_index: int
    role: str
    root: Node

    def reject(
        self,
        code: ReasonCode,
        reason: str,
        *,
        from_constants: bool,
        site: Optional[str],
        keep_stock: bool = False,
    ) -> Rejection:
        return Rejection(
            self.gemm,
            self.arg_index,
            self.role,
            reason,
            from_constants,
            site,
            code,
            keep_stock=keep_stock,
        )


def _run_time_rule(
    *, arg: _Argument, cmap: _ConstantMap, site: Optional[str]
) -> Optional[Rejection]:
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


def _walked_nodes_rule(
    *, arg: _Argument, closure: list[Node], cmap: _ConstantMap, site: Optional[str]
) -> Optional[Rejection]:
    """XNF501 again, node by node over the walked computation.

    The constant map is cached per graph and node count, so a rewrite that keeps the
    count (an argument or a target replaced in place) would leave it stale. The nodes
    walked are re-checked here, so a stale map can only decline a fold, never fold
    something computed at run time.
    """
    for node in closure:
        if node.op == "placeholder":
            problem = (
                None
                if cmap.constant.get(node.name, False)
                else (f"'{node.name}' is not a constant")
            )
        elif node.op == "call_function":
            problem = _op_problem(node)
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
    *, arg: _Argument, sources: tuple[Node, ...], site: Optional[str]
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


def _other_readers_rule(
    *,
    arg: _Argument,
    closure: list[Node],
    members: set[Node],
    weight_only: dict[str, bool],
    non_folding: frozenset[str],
    site: Optional[str],
) -> Optional[Rejection]:
    """XNF504: folding replaces the whole computation by one constant; anything else that
    reads a source or an intermediate would keep it alive, and the program would store
    both. The one exception is another GEMM weight or bias computed from the same sources
    (a packed projection split per GEMM, a module called twice): those fold too."""
    role, root = arg.role, arg.root
    for node in closure:
        for user in _readers(node):
            if user in members or user is arg.gemm:
                continue
            if _used_as_gemm_weight(node, user, non_folding) or (
                user.op == "call_function" and weight_only.get(user.name, False)
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


def _size_rule(
    *,
    arg: _Argument,
    ep: ExportedProgram,
    closure: list[Node],
    nodes: tuple[Node, ...],
    cmap: _ConstantMap,
    options: FoldOptions,
    stored_elsewhere: frozenset[str],
    weight_only: dict[str, bool],
    non_folding: frozenset[str],
    site: Optional[str],
) -> Optional[Rejection]:
    """XNF505-XNF508: the folds that share these sources, taken together, must not make
    the program larger than the sources they free."""
    role, root = arg.role, arg.root
    max_nodes = options.max_fold_nodes
    elsewhere = (
        frozenset(name for name, fqn in cmap.fqns.items() if fqn in stored_elsewhere)
        if stored_elsewhere
        else frozenset()
    )
    shared = _shared_component(
        closure,
        cmap,
        limit=4 * max_nodes,
        ep=ep,
        stored_elsewhere=elsewhere,
        weight_only=weight_only,
        non_folding=non_folding,
    )
    if shared is None:
        return arg.reject(
            SHARED_TOO_WIDE,
            f"the {role} shares its sources with more than {4 * max_nodes} nodes of "
            "other weight computations (raise max_fold_nodes to fold them)",
            from_constants=True,
            site=site,
        )
    if isinstance(shared, str):
        return arg.reject(
            SHARED_NOT_FOLDED,
            f"the {role} computation reads {shared}, and that one is not folded: it "
            "also feeds something other than a GEMM weight",
            from_constants=True,
            site=site,
        )
    folded_roots, freed_sources, kept_sources = shared
    folded = sum(node_bytes(r) or 0 for r in folded_roots)
    sizes = [node_bytes(s) for s in (*folded_roots, *freed_sources)]
    if any(b is None for b in sizes):
        return arg.reject(
            DYNAMIC_SHAPE, f"the {role} has a dynamic shape", from_constants=True, site=site
        )
    # Floating-point sources are measured at the folded tensor's element size: an fp32
    # GEMM needs an fp32 weight, so `w_fp16.float()` folds to exactly what a hand-folded
    # model would store (twice the fp16 bytes); a float cast never counts as growth. An
    # integer source (`w_int8.float() * scale`) keeps its own size: that is compression,
    # for XNNPACK's quantized GEMMs rather than a 4x larger fp32 fold. Fill ops count as
    # sources (see FILL_OPS). What stays declined is growth in elements: a low-rank
    # product without its base weight, an expand()ed or repeat()ed kernel.
    itemsize = root.meta[VAL_META_KEY].element_size()
    freed = sum(node_bytes(s, itemsize) or 0 for s in freed_sources) + sum(
        node_bytes(n, itemsize) or 0 for n in nodes if _fill_op(n)
    )
    if folded <= freed:
        return None
    if kept_sources:
        kept = kept_sources[0]
        where = (
            "a GEMM's stored weight"
            if any(_used_as_gemm_weight(kept, user) for user in kept.users)
            else "stored for another method of the program"
        )
        why_not = f"source '{kept.name}' is also {where}, so folding frees nothing of it"
    else:
        why_not = f"its sources {freed} bytes"
    takes = (
        f"the {len(folded_roots)} folded weights sharing its sources take"
        if len(folded_roots) > 1
        else f"the folded {role} takes"
    )
    rejection = arg.reject(
        GROWS_PROGRAM,
        f"folding would grow the program: {takes} {folded} bytes, {why_not}",
        from_constants=True,
        site=site,
    )
    return dataclasses.replace(rejection, growth=Growth(folded_roots[0].name, folded, freed))


def _shared_nodes(nodes: tuple[Node, ...], root: Node, members: set[Node]) -> tuple[Node, ...]:
    """The intermediates of a computation that something outside it also reads."""
    return tuple(n for n in nodes if n is not root and any(u not in members for u in n.users))


@_in_a_scope
def computation_key(
    computation: WeightComputation,
    memo: dict[Node, object],
    ep: Optional[ExportedProgram] = None,
) -> object:
    """Equal keys mean equal folded values (same ops on the same sources), so the fold
    can reuse one constant for a module called twice. ``memo`` is shared across calls."""
    for node in (*computation.sources, *computation.nodes):
        _structure(node, memo, ep)  # inputs first, so the recursion stays one level deep
    return memo[computation.root]
