"""Which nodes hold a compile-time constant value, which are computed at run time, and which
constants the program stores.

One forward sweep over the graph classifies every node, so asking about many GEMMs costs
O(graph) in total rather than one backward walk to the inputs per GEMM (a transformer has
hundreds of activation-by-activation matmuls whose walks would otherwise be quadratic).
For every non-constant node the sweep also records what made it so, which becomes the
user-visible reason. The sweep's `ConstantMap` is kept in the `AnalysisCache` the caller
hands in (``cache``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from executorch.exir.delegate import executorch_call_delegate
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind
from torch.fx import Graph, Node
from torch.fx.experimental.symbolic_shapes import free_symbols

from xnnfold._meta import VAL_META_KEY
from xnnfold._upstream import schema_of
from xnnfold.passes._ops import (
    FOLDABLE_NAMESPACES,
    GETITEM,
    SYMBOLIC_SCALAR_OPS,
    UNFOLDABLE_OPS,
)
from xnnfold.passes.analysis._cache import AnalysisCache, ConstantMap, own_cache
from xnnfold.passes.analysis._nodes import (
    constant_fqns,
    op_overload,
    readers,
    used_as_gemm_weight,
)

__all__ = [
    "constant_computation",
    "constant_map",
    "input_dependent",
    "is_constant_node",
    "is_constant_source",
    "op_problem",
    "stored_constants",
    "weight_only_of",
]


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


def op_problem(node: Node) -> Optional[str]:
    """Why call_function ``node``'s value is not a constant function of its inputs, or None."""
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


def _weight_only_sweep(
    graph: Graph, constant: dict[str, bool], non_folding: frozenset[str]
) -> dict[str, bool]:
    weight_only: dict[str, bool] = {}
    for node in reversed(graph.nodes):
        users = readers(node)
        weight_only[node.name] = (
            constant[node.name]
            and bool(users)
            and all(
                used_as_gemm_weight(node, user, non_folding)
                or (user.op == "call_function" and weight_only.get(user.name, False))
                for user in users
            )
        )
    return weight_only


def weight_only_of(
    ep: ExportedProgram, non_folding: frozenset[str], *, cache: Optional[AnalysisCache]
) -> dict[str, bool]:
    """`ConstantMap.weight_only`, with the GEMMs in ``non_folding`` counted as readers
    that keep what they read (one more sweep per distinct set, cached with the map)."""
    cmap = constant_map(ep, cache=cache)
    if not non_folding:
        return cmap.weight_only
    cached = cmap.weight_only_without.get(non_folding)
    if cached is None:
        cached = cmap.weight_only_without[non_folding] = _weight_only_sweep(
            ep.graph, cmap.constant, non_folding
        )
    return cached


def constant_map(ep: ExportedProgram, *, cache: Optional[AnalysisCache]) -> ConstantMap:
    """The sweep of ``ep``'s graph: from ``cache`` (one stage's, in which ``ep`` is not
    edited) where it was swept there before, else swept and kept there (None: swept for
    this call alone)."""
    graph = ep.graph
    cached = cache.get(ep) if cache is not None else None
    if cached is not None:
        return cached
    constant: dict[str, bool] = {}
    culprit: dict[str, str] = {}
    index = _SignatureIndex.of(ep)
    for node in graph.nodes:
        if node.op == "placeholder":
            problem = _source_problem(index, node)
        elif node.op == "call_function":
            problem = op_problem(node)
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
    result = ConstantMap(
        constant,
        culprit,
        weight_only,
        order,
        constant_fqns(ep),
    )
    if cache is not None:
        cache[ep] = result
    return result


def is_constant_node(
    ep: ExportedProgram, node: Node, *, cache: Optional[AnalysisCache] = None
) -> bool:
    """True when ``node``'s value is computed from constants alone (the per-graph sweep)."""
    return constant_map(ep, cache=cache).constant.get(node.name, False)


def constant_computation(
    ep: ExportedProgram, gemm: Node, index: int, *, cache: Optional[AnalysisCache] = None
) -> bool:
    """Whether ``gemm``'s argument ``index`` is computed from constants alone: what reads
    its sources at run time if the GEMM does not fold it."""
    arg = gemm.args[index] if index < len(gemm.args) else None
    return (
        isinstance(arg, Node) and arg.op != "placeholder" and is_constant_node(ep, arg, cache=cache)
    )


def input_dependent(ep: ExportedProgram, written_buffers: frozenset[str]) -> set[Node]:
    """The nodes computed at run time: from the program's inputs or from a buffer some
    method writes. Unlike the fold rules' constant map, a dequantized weight is not one."""
    signature = ep.graph_signature
    written = written_buffers | set(signature.buffers_to_mutate.values())
    starts = {
        spec.arg.name
        for spec in signature.input_specs
        if spec.kind == InputKind.USER_INPUT
        or (spec.kind == InputKind.BUFFER and spec.target in written)
    }
    found: set[Node] = set()
    for node in ep.graph.nodes:
        if node.op == "placeholder":
            run_time = node.name in starts
        else:
            run_time = any(arg in found for arg in node.all_input_nodes)
        if run_time:
            found.add(node)
    return found


def is_constant_source(
    ep: ExportedProgram,
    node: Node,
    written_buffers: Optional[set[str] | frozenset[str]] = None,
    *,
    cache: Optional[AnalysisCache] = None,
) -> bool:
    """True when placeholder ``node`` is a parameter, a constant, or a buffer that
    neither this program nor another method (``written_buffers``, by FQN) writes."""
    if node.op != "placeholder" or not constant_map(ep, cache=cache).constant.get(node.name, False):
        return False
    fqn = ep.graph_signature.inputs_to_buffers.get(node.name)
    return not (fqn is not None and written_buffers and fqn in written_buffers)


def stored_constants(
    ep: ExportedProgram,
    non_folding: frozenset[str] = frozenset(),
    *,
    cache: Optional[AnalysisCache] = None,
) -> frozenset[str]:
    """FQNs of the constants ``ep`` stores whatever xnnfold folds.

    A constant is stored when something reads it other than a computation that only
    feeds GEMM weights and biases: an embedding lookup, an elementwise op on the
    activations, a GEMM that takes it directly as its weight, or the computed weight or
    bias of a GEMM in ``non_folding`` (one that will not fold: declined for its
    arguments or its computation, or one no edge config folds). Another method that
    folds a computation of such a constant frees none of its bytes.
    """
    cache = own_cache(cache)
    cmap = constant_map(ep, cache=cache)
    fqns = cmap.fqns
    weight_only = weight_only_of(ep, non_folding, cache=cache)
    stored: set[str] = set()
    for node in ep.graph.nodes:
        if node.op != "placeholder" or node.name not in fqns:
            continue
        if any(
            # A GEMM whose own result only feeds weights (the `A @ B` of a low-rank
            # weight) is part of a computation, not a reader of a stored weight.
            not (user.op == "call_function" and weight_only.get(user.name, False))
            for user in readers(node)
        ):
            stored.add(fqns[node.name])
    return frozenset(stored)
