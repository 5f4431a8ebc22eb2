"""Small questions about one node that every stage asks: its ATen op, its site mark, its
role in a GEMM, its readers. Each reads the node and its metadata and nothing else."""

from __future__ import annotations

from typing import Optional

import torch
from torch.export import ExportedProgram
from torch.fx import Node

from xnnfold._meta import (
    CUSTOM_META_KEY,
    EXTERNAL_TAG_KEYS,
    SITE_META_KEY,
    VAL_META_KEY,
)
from xnnfold._upstream import (
    aten_op_of,
    EdgeOpOverload,
    OpOverload,
    overload_name_of,
    schema_of,
)
from xnnfold.passes._ops import ASSERTION_OPS, EDGE_NO_DECOMP_NAMESPACE, GEMM_ARGS

__all__ = [
    "arg_role",
    "constant_fqns",
    "constant_tensor",
    "external_tag",
    "gemm_positions",
    "is_float32",
    "is_gemm",
    "op_overload",
    "readers",
    "site_of",
    "used_as_gemm_weight",
]


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


def constant_fqns(ep: ExportedProgram) -> dict[str, str]:
    """Placeholder name -> state_dict / constants key of every constant input."""
    signature = ep.graph_signature
    return {
        **signature.inputs_to_parameters,
        **signature.inputs_to_buffers,
        **signature.inputs_to_lifted_tensor_constants,
    }


def constant_tensor(ep: ExportedProgram, fqn: str) -> Optional[torch.Tensor]:
    """The tensor ``ep`` holds under the state_dict / constants key ``fqn`` (parameters and
    persistent buffers in its state_dict, lifted constants and non-persistent buffers in
    its constants; the signature gives each key one kind), or None."""
    value = ep.state_dict.get(fqn, ep.constants.get(fqn))
    return value if isinstance(value, torch.Tensor) else None


def external_tag(node: Node) -> Optional[str]:
    """The external data file (``.ptd``) tag ``node`` is stored under, if any."""
    for meta_key, tag_key in EXTERNAL_TAG_KEYS:
        meta = node.meta.get(meta_key) if meta_key is not None else node.meta
        tag = meta.get(tag_key) if isinstance(meta, dict) else None
        if tag is not None:
            return str(tag)
    return None


def gemm_positions(node: Node) -> Optional[tuple[int, ...]]:
    """The weight and bias positions of a GEMM (ATen or edge; empty for a product of two
    activations), or None when ``node`` is not one."""
    if node.op != "call_function":
        return None
    return GEMM_ARGS.get(node.target)


def is_gemm(node: Node) -> bool:
    return gemm_positions(node) is not None


def used_as_gemm_weight(value: Node, user: Node, non_folding: frozenset[str] = frozenset()) -> bool:
    """True when ``user`` is a GEMM that reads ``value`` only as its weight or bias (and
    is not one of ``non_folding``, GEMMs the partitioner took without folding their
    arguments, or not at all: those read a computed weight like any other op)."""
    positions = gemm_positions(user)
    if positions is None or value in user.kwargs.values() or user.name in non_folding:
        return False
    uses = [i for i, arg in enumerate(user.args) if arg is value]
    return bool(uses) and all(i in positions for i in uses)


def readers(node: Node) -> list[Node]:
    """``node``'s users that use its value: not the checks torch.export records on a
    tensor (`ASSERTION_OPS`), which store nothing and which to_edge removes."""
    return [user for user in node.users if user.target not in ASSERTION_OPS]


def is_float32(value: object) -> bool:
    """Whether ``value`` is a node whose value is an fp32 tensor."""
    val = value.meta.get(VAL_META_KEY) if isinstance(value, Node) else None
    return isinstance(val, torch.Tensor) and val.dtype == torch.float32
