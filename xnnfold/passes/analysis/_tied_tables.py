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

This module only finds the tables; the partitioner tags them (`partition/_tied_tagging.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Optional

import torch
from torch.export import ExportedProgram
from torch.fx import Node

from xnnfold._meta import DELEGATION_TAG_META_KEY, VAL_META_KEY
from xnnfold._upstream import schema_of
from xnnfold.passes._reason_codes import ReasonCode, TIED_OTHER_USE
from xnnfold.passes.analysis._nodes import (
    constant_fqns,
    external_tag,
    op_overload,
    readers,
)

__all__ = [
    "LOOKUP_OPS",
    "TableUses",
    "TiedTable",
    "TiedTables",
    "UntiedTable",
    "find_tied_tables",
    "read_only_as_linear_weight",
    "table_uses",
]

# The op whose weight XNNPACK stores byte for byte as the program holds it, and the
# dtypes it keeps (its node visitor converts other float weights to fp32; a linear's
# weight is never forced to fp32).
_LINEAR: tuple[str, ...] = ("aten::linear",)
# Ops that read a table by index: XNNPACK has no config for them, so the program keeps the
# copy they read (the other half of a table tied across methods).
LOOKUP_OPS: Final = frozenset({"aten::embedding", "aten::index_select", "aten::index"})
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


def read_only_as_linear_weight(table: Node) -> bool:
    """Whether every reader of the constant placeholder ``table`` is a linear taking it
    as its own weight, in a dtype XNNPACK stores unconverted: a delegate then stores the
    table's bytes as the program holds them."""
    val = table.meta.get(VAL_META_KEY)
    users = readers(table)
    return (
        isinstance(val, torch.Tensor)
        and val.dtype in _KEPT_DTYPES
        and bool(users)
        and all(_is_linear_weight(table, user) for user in users)
    )


def _table_verdict(table: Node, inside: list[Node], *, across_methods: bool) -> Optional[bool]:
    """Whether the constant ``table``, read by ``inside`` in a delegate, is stored once
    (True), kept twice for a delegated reader other than a linear's weight (False), or
    is no tied table here (None)."""
    weight_of = [user for user in inside if _is_linear_weight(table, user)]
    if not weight_of:
        # Read only outside the delegates: the program's copy of a table another
        # method's delegate multiplies by.
        return True if across_methods and not inside else None
    return len(weight_of) == len(inside)


def find_tied_tables(
    ep: ExportedProgram, *, across_methods: frozenset[str] = frozenset()
) -> TiedTables:
    """The constants of a partitioned edge program stored once when tagged for one file.

    Within the method: a constant read both inside a delegate and by an op outside any
    delegate, that a delegated linear takes as its own weight (in a dtype XNNPACK keeps):
    tied when every reader inside is such a linear, untied (with the reason, for the
    first such linear) when the delegate also reads it otherwise.

    Across methods: ``across_methods`` names the constants (by FQN) that one method of
    the lowering reads as a linear's own weight and another reads otherwise
    (`CrossMethodFacts.tied_across_methods`). Each is tied here where this method's copy
    is the program's (read outside every delegate) or a delegated linear's weight, and
    untied where a delegate here also reads it otherwise.

    A constant already tagged for an external file is the user's choice and left out.
    """
    fqns = constant_fqns(ep)
    mutated = set(ep.graph_signature.buffers_to_mutate.values())
    tied: list[TiedTable] = []
    untied: list[UntiedTable] = []
    for node in ep.graph.nodes:
        fqn = fqns.get(node.name) if node.op == "placeholder" else None
        if fqn is None or fqn in mutated or external_tag(node) is not None:
            continue
        shared = fqn in across_methods
        tag = node.meta.get(DELEGATION_TAG_META_KEY)
        if tag is None and not shared:
            continue
        users = readers(node)
        inside = [
            u for u in users if tag is not None and u.meta.get(DELEGATION_TAG_META_KEY) == tag
        ]
        outside = [u for u in users if u.meta.get(DELEGATION_TAG_META_KEY) is None]
        if not (inside and outside) and not shared:
            continue
        val = node.meta.get(VAL_META_KEY)
        if not isinstance(val, torch.Tensor) or val.dtype not in _KEPT_DTYPES:
            continue
        verdict = _table_verdict(node, inside, across_methods=shared)
        if verdict is True:
            tied.append(TiedTable(node.name, fqn, val.numel() * val.element_size()))
        elif verdict is False:
            first = next(u for u in inside if _is_linear_weight(node, u))
            untied.append(UntiedTable(node.name, fqn, first.name, TIED_OTHER_USE))
    return TiedTables(tuple(tied), tuple(untied))


@dataclass(frozen=True)
class TableUses:
    """How one exported (ATen) program reads its constant tables, by FQN: the halves of a
    table tied across methods, read so that every copy is stored as the program holds it.

    Attributes:
        as_linear_weight: the constants it reads as a linear's own weight (in a dtype
            XNNPACK stores unconverted), and otherwise only looks up.
        looked_up: the constants it only looks up (`LOOKUP_OPS`, which XNNPACK never
            delegates: the program keeps the copy).
    """

    as_linear_weight: frozenset[str] = frozenset()
    looked_up: frozenset[str] = frozenset()


def table_uses(ep: ExportedProgram) -> TableUses:
    """How ``ep`` reads its constants (`TableUses`)."""
    fqns = constant_fqns(ep)
    as_weight: set[str] = set()
    looked_up: set[str] = set()
    for node in ep.graph.nodes:
        fqn = fqns.get(node.name) if node.op == "placeholder" else None
        users = readers(node) if fqn is not None else []
        if not users:
            continue
        lookups = [user for user in users if _op_name(user) in LOOKUP_OPS]
        weights = [user for user in users if _is_linear_weight(node, user)]
        if len(lookups) == len(users):
            looked_up.add(fqn)  # type: ignore[arg-type]
        elif weights and len(weights) + len(lookups) == len(users):
            val = node.meta.get(VAL_META_KEY)
            if isinstance(val, torch.Tensor) and val.dtype in _KEPT_DTYPES:
                as_weight.add(fqn)  # type: ignore[arg-type]
    return TableUses(frozenset(as_weight), frozenset(looked_up))
