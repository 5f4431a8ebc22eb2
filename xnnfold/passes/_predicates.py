"""Decide whether a GEMM's weight or bias is a foldable computation of constants.

XNNPACK wants every GEMM weight to be a static tensor. A weight computed from parameters
(weight_norm, spectral_norm, `W.t()`, `w * scale`) is a constant too, just not yet
evaluated. `find_weight_computation` finds that computation and says whether folding it
is safe and does not grow the program; the partitioner configs and the fold pass both call
it, so "delegated" and "folded" can never disagree.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Optional, Union

import torch
from executorch.exir.dialects.edge._ops import EdgeOpOverload
from torch._export.utils import is_buffer, is_lifted_tensor_constant, is_param
from torch.export import ExportedProgram
from torch.fx import Graph, Node
from torch.fx.experimental.symbolic_shapes import free_symbols

from xnnfold.passes._constants import (
    CUSTOM_META_KEY,
    DEFAULT_MAX_FOLD_NODES,
    FOLDABLE_NAMESPACES,
    GETITEM,
    SITE_META_KEY,
    UNFOLDABLE_OPS,
)

__all__ = [
    "WeightComputation",
    "Rejection",
    "arg_role",
    "can_fold",
    "find_weight_computation",
    "op_overload",
    "site_of",
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
    """

    gemm: Node
    arg_index: int
    role: str
    root: Node
    nodes: tuple[Node, ...]
    sources: tuple[Node, ...]
    site: Optional[str]


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


def op_overload(target: object) -> Optional[torch._ops.OpOverload]:
    """The ATen-level OpOverload behind an ATen or edge-dialect target, else None."""
    if isinstance(target, EdgeOpOverload):
        return target._op
    if isinstance(target, torch._ops.OpOverload):
        return target
    return None


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


_CONSTANT_MAPS: "weakref.WeakKeyDictionary[Graph, _ConstantMap]" = (
    weakref.WeakKeyDictionary()
)


def _source_problem(ep: ExportedProgram, node: Node) -> Optional[str]:
    if is_param(ep, node) or is_lifted_tensor_constant(ep, node):
        return None
    if is_buffer(ep, node):
        mutated = ep.graph_signature.buffers_to_mutate.values()
        target = ep.graph_signature.inputs_to_buffers.get(node.name)
        if node.name in mutated or target in mutated:
            return f"buffer '{node.name}' is written by the program"
        return None
    return f"'{node.name}' is a runtime input"


def _op_problem(node: Node) -> Optional[str]:
    if node.target is GETITEM:
        return None
    op = op_overload(node.target)
    if op is None:
        return f"'{node.name}' calls {node.target}, which is not an ATen op"
    if op.namespace not in FOLDABLE_NAMESPACES:
        return f"'{node.name}' calls {op}, which is not a pure ATen op"
    if op._schema.is_mutable:
        return f"'{node.name}' calls {op}, which mutates its inputs"
    if torch.Tag.nondeterministic_seeded in op.tags:
        return f"'{node.name}' calls {op}, which is random"
    if op in UNFOLDABLE_OPS:
        return f"'{node.name}' calls {op}, whose value is not a function of its inputs"
    val = node.meta.get("val")
    vals = val if isinstance(val, (tuple, list)) else (val,)
    for v in vals:
        if isinstance(v, torch.Tensor) and free_symbols(v):
            return f"'{node.name}' has a shape that depends on the inputs"
    return None


def _constant_map(ep: ExportedProgram) -> _ConstantMap:
    graph = ep.graph
    cached = _CONSTANT_MAPS.get(graph)
    if (
        cached is not None
        and cached.node_count == len(graph.nodes)
        and cached.signature is ep.graph_signature
    ):
        return cached
    constant: dict[str, bool] = {}
    culprit: dict[str, str] = {}
    for node in graph.nodes:
        if node.op == "placeholder":
            problem = _source_problem(ep, node)
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
    result = _ConstantMap(len(graph.nodes), ep.graph_signature, constant, culprit)
    _CONSTANT_MAPS[graph] = result
    return result


def _nbytes(node: Node) -> Optional[int]:
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor) or free_symbols(val):
        return None
    return val.numel() * val.element_size()


def _topological_closure(root: Node, limit: int) -> Optional[list[Node]]:
    """Post-order of ``root``'s ancestors (inputs first); None when over ``limit``."""
    order: list[Node] = []
    seen: set[Node] = {root}
    stack: list[tuple[Node, int]] = [(root, 0)]
    while stack:
        node, i = stack.pop()
        inputs = node.all_input_nodes
        if i < len(inputs):
            stack.append((node, i + 1))
            child = inputs[i]
            if child not in seen:
                seen.add(child)
                if len(seen) > limit:
                    return None
                stack.append((child, 0))
        else:
            order.append(node)
    return order


def find_weight_computation(
    gemm: Node,
    arg_index: int,
    ep: ExportedProgram,
    *,
    arg_positions: tuple[int, ...],
    max_nodes: int = DEFAULT_MAX_FOLD_NODES,
) -> Union[WeightComputation, Rejection, None]:
    """Find the computation behind ``gemm.args[arg_index]`` and check it can be folded.

    Pure: reads the graph and the program's signature, changes nothing.

    Args:
        gemm: a GEMM node (convolution, linear, addmm, mm or their ATen forms).
        arg_index: the argument to inspect (a weight or bias position).
        ep: the program that owns ``gemm``.
        arg_positions: the GEMM's (weight, bias) positions, to name the role.
        max_nodes: the largest computation to walk; larger ones are declined.

    Returns:
        None when the argument is absent or already a parameter (nothing to fold), a
        `WeightComputation` when folding is safe, otherwise a `Rejection` with the reason.
    """
    role = arg_role(arg_positions, arg_index)
    root = gemm.args[arg_index] if arg_index < len(gemm.args) else None
    if not isinstance(root, Node) or root.op == "placeholder":
        return None

    def reject(reason: str, from_constants: bool, site: Optional[str]) -> Rejection:
        return Rejection(gemm, arg_index, role, reason, from_constants, site)

    site = site_of(root)
    cmap = _constant_map(ep)
    if not cmap.constant.get(root.name, False):
        problem = cmap.culprit.get(root.name, "it is not a constant")
        return reject(
            f"the {role} is computed at run time: {problem}",
            False,
            site,
        )

    closure = _topological_closure(root, max_nodes)
    if closure is None:
        return reject(
            f"the {role} computation has more than {max_nodes} nodes "
            "(raise max_fold_nodes to fold it)",
            True,
            site,
        )
    nodes = tuple(n for n in closure if n.op == "call_function")
    sources = tuple(n for n in closure if n.op == "placeholder")
    members = set(closure)
    if site is None:
        site = next((s for s in map(site_of, reversed(nodes)) if s), None)

    # Folding replaces the whole computation by one constant; anything else that reads a
    # source or an intermediate would keep it alive, and the program would store both.
    for user in root.users:
        if user is not gemm:
            return reject(
                f"the computed {role} '{root.name}' is also used by '{user.name}'",
                True,
                site,
            )
    for node in closure:
        if node is root:
            continue
        for user in node.users:
            if user not in members:
                what = "source" if node.op == "placeholder" else "intermediate"
                return reject(
                    f"{what} '{node.name}' of the {role} computation is also used by "
                    f"'{user.name}'",
                    True,
                    site,
                )

    folded = _nbytes(root)
    freed = [_nbytes(s) for s in sources]
    if folded is None or any(b is None for b in freed):
        return reject(f"the {role} has a dynamic shape", True, site)
    if folded > sum(b for b in freed if b is not None):
        return reject(
            f"folding would grow the program: the folded {role} takes {folded} bytes, "
            f"its sources {sum(b for b in freed if b is not None)}",
            True,
            site,
        )
    return WeightComputation(gemm, arg_index, role, root, nodes, sources, site)


def can_fold(
    gemm: Node,
    arg_index: int,
    ep: ExportedProgram,
    *,
    arg_positions: tuple[int, ...],
    max_nodes: int = DEFAULT_MAX_FOLD_NODES,
) -> bool:
    """True when ``gemm.args[arg_index]`` is a computation `find_weight_computation` folds."""
    return isinstance(
        find_weight_computation(
            gemm, arg_index, ep, arg_positions=arg_positions, max_nodes=max_nodes
        ),
        WeightComputation,
    )
