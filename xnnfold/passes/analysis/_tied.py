"""Tied tables: a constant a delegated GEMM takes as its weight and the program also reads.

An embedding table that a tied lm_head multiplies by (``F.linear(x, emb.weight)``) is read
twice after partitioning: the lookup stays on the portable kernels and reads the
program's constant, and XNNPACK stores its own copy of the GEMM's weight in the named
data. Both copies hold the same bytes when XNNPACK stores the weight as it is: a
``linear`` weight, ``[out, in]``, untransposed and unconverted (the node visitor makes
the weight contiguous and stores those bytes). executorch's named data store
keeps identical bytes under one buffer per external file, so tagging both copies for the
same ``.ptd`` stores the table once. XNNPACK keeps a float16 or bfloat16 linear weight in
its dtype too. A table the delegate also reads otherwise (an elementwise op's operand, a
convolution's kernel, which it stores channels-last) is not proven to be stored byte for
byte and keeps both copies, with its reason (XNF517). A weight computed from the table (a
transpose, a cast) is a run-time input of the delegate (XNF504), which stores no copy;
a quantized weight is another tensor, with other bytes.

This module only finds the tables; the partitioner tags them (`partition/_tied.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch.export import ExportedProgram
from torch.fx import Node

from xnnfold._meta import DELEGATION_TAG_META_KEY, VAL_META_KEY
from xnnfold._upstream import schema_of
from xnnfold.passes._codes import ReasonCode, TIED_OTHER_USE
from xnnfold.passes.analysis._nodes import (
    constant_fqns,
    constant_tensor,
    external_tag,
    is_gemm,
    op_overload,
    readers,
)

__all__ = ["TiedTable", "TiedTables", "UntiedTable", "find_tied_tables", "tied_across_methods"]

# The op whose weight XNNPACK stores byte for byte as the program holds it, and the
# dtypes it keeps (its node visitor converts other float weights to fp32; a linear's
# weight is never forced to fp32).
_LINEAR: tuple[str, ...] = ("aten::linear",)
_KEPT_DTYPES = frozenset({torch.float32, torch.float16, torch.bfloat16})
_WEIGHT_INDEX = 1


@dataclass(frozen=True)
class TiedTable:
    """A constant stored once: a delegated linear's weight that the program also reads.

    Attributes:
        placeholder: the constant's placeholder in the partitioned program.
        fqn: its state_dict (or constants) key.
        nbytes: its size, the bytes storing it once saves.
    """

    placeholder: str
    fqn: str
    nbytes: int


@dataclass(frozen=True)
class UntiedTable:
    """A constant the program reads and a delegate stores in other bytes (twice).

    Attributes:
        placeholder: the constant's placeholder.
        fqn: its state_dict (or constants) key.
        gemm: the delegated GEMM that reads it.
        code: why it is not stored once (XNF517).
    """

    placeholder: str
    fqn: str
    gemm: str
    code: ReasonCode


@dataclass(frozen=True)
class TiedTables:
    """What `find_tied_tables` found in one partitioned program."""

    tied: tuple[TiedTable, ...] = ()
    untied: tuple[UntiedTable, ...] = ()


def _op_name(node: Node) -> Optional[str]:
    op = op_overload(node.target) if node.op == "call_function" else None
    return schema_of(op).name if op is not None else None


def _is_linear_weight(table: Node, user: Node) -> bool:
    return (
        _op_name(user) in _LINEAR
        and len(user.args) > _WEIGHT_INDEX
        and user.args[_WEIGHT_INDEX] is table
        and table not in user.args[:_WEIGHT_INDEX]
        and table not in user.args[_WEIGHT_INDEX + 1 :]
        and table not in user.kwargs.values()
    )


def find_tied_tables(ep: ExportedProgram) -> TiedTables:
    """The constants of a partitioned edge program read both inside a delegate and by an
    op outside any delegate, that a delegated linear takes as its own weight (in a dtype
    XNNPACK keeps): tied when every reader inside is such a linear, untied (with the
    reason, for the first such linear) when the delegate also reads it otherwise.

    A constant already tagged for an external file is the user's choice and left out.
    """
    fqns = constant_fqns(ep)
    mutated = set(ep.graph_signature.buffers_to_mutate.values())
    tied: list[TiedTable] = []
    untied: list[UntiedTable] = []
    for node in ep.graph.nodes:
        fqn = fqns.get(node.name) if node.op == "placeholder" else None
        tag = node.meta.get(DELEGATION_TAG_META_KEY)
        if fqn is None or tag is None or fqn in mutated or external_tag(node) is not None:
            continue
        users = readers(node)
        inside = [u for u in users if u.meta.get(DELEGATION_TAG_META_KEY) == tag]
        outside = [u for u in users if u.meta.get(DELEGATION_TAG_META_KEY) is None]
        if not inside or not outside:
            continue
        val = node.meta.get(VAL_META_KEY)
        if not isinstance(val, torch.Tensor) or val.dtype not in _KEPT_DTYPES:
            continue
        weight_of = [user for user in inside if _is_linear_weight(node, user)]
        if not weight_of:
            continue
        if len(weight_of) == len(inside):
            tied.append(TiedTable(node.name, fqn, val.numel() * val.element_size()))
        else:
            untied.append(UntiedTable(node.name, fqn, weight_of[0].name, TIED_OTHER_USE))
    return TiedTables(tuple(tied), tuple(untied))


def _linear_weights(ep: ExportedProgram) -> dict[str, Node]:
    """fqn -> placeholder of the constants ``ep`` reads as a linear's own weight."""
    fqns = constant_fqns(ep)
    found: dict[str, Node] = {}
    for node in ep.graph.nodes:
        fqn = fqns.get(node.name) if node.op == "placeholder" else None
        val = node.meta.get(VAL_META_KEY)
        if fqn is None or not isinstance(val, torch.Tensor) or val.dtype not in _KEPT_DTYPES:
            continue
        if any(_is_linear_weight(node, user) for user in readers(node)):
            found[fqn] = node
    return found


def _read_otherwise(ep: ExportedProgram) -> dict[str, Node]:
    """fqn -> placeholder of the constants ``ep`` reads other than as a GEMM argument."""
    fqns = constant_fqns(ep)
    found: dict[str, Node] = {}
    for node in ep.graph.nodes:
        fqn = fqns.get(node.name) if node.op == "placeholder" else None
        if fqn is not None and any(not is_gemm(user) for user in readers(node)):
            found[fqn] = node
    return found


def _tensor(ep: ExportedProgram, fqn: str) -> Optional[torch.Tensor]:
    value = constant_tensor(ep, fqn)
    return value if isinstance(value, torch.Tensor) else None


def tied_across_methods(programs: dict[str, ExportedProgram]) -> dict[str, tuple[str, ...]]:
    """Method -> placeholders of the tables one method reads as a linear's own weight
    and another reads otherwise (an embedding lookup), on the exported (ATen) programs.

    The methods must share the tensor itself (exported from modules that hold the same
    parameter); a table only one method reads both ways is the partitioner's to find.
    """
    weights = {m: _linear_weights(ep) for m, ep in programs.items()}
    others = {m: _read_otherwise(ep) for m, ep in programs.items()}
    tensors: dict[int, set[str]] = {}
    for method, ep in programs.items():
        for fqn in weights[method]:
            tensor = _tensor(ep, fqn)
            if tensor is not None:
                tensors.setdefault(id(tensor), set()).add(method)
    shared: set[int] = set()
    for method, ep in programs.items():
        for fqn in others[method]:
            tensor = _tensor(ep, fqn)
            readers_as_weight = tensors.get(id(tensor), set()) if tensor is not None else set()
            if readers_as_weight - {method}:
                shared.add(id(tensor))
    found: dict[str, tuple[str, ...]] = {}
    for method, ep in programs.items():
        names = [
            node.name
            for fqn, node in {**weights[method], **others[method]}.items()
            if id(_tensor(ep, fqn)) in shared
        ]
        if names:
            found[method] = tuple(sorted(set(names)))
    return found
