"""Which tied tables a lowered program stores once, and which twice, read from what it
will write.

A delegate keeps a linear's constant weight in its named data under the SHA-256 of its
bytes, in the ``.pte`` or in an external data file; the program keeps its own copy of a
constant an op outside every delegate reads, in the ``.pte`` or in the external file its
placeholder is tagged for (``meta["constant_tag"]``). A table is **stored once** when the
program's copy and a delegate's copy land in the same external file with the same bytes
(the named data store keeps one), and **stored twice** when a delegate stores the bytes
of a constant the program also stores elsewhere: the stock layout, and xnnfold's with
``tie_tables=False``, which tagging both copies for one file would store once. Both are
read from the artifacts executorch serializes, so what is reported is what the files
hold.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Iterator, Optional

import torch
from executorch.exir.delegate import executorch_call_delegate
from torch.export import ExportedProgram

from xnnfold._meta import EXTERNAL_CONSTANT_TAG
from xnnfold.passes.analysis import (
    constant_fqns,
    constant_tensor,
    external_tag,
    read_only_as_linear_weight,
)
from xnnfold.passes.report._programs import methods, Program

__all__ = ["SharedTable", "TableCopies", "TableStoredTwice", "table_copies"]


@dataclass(frozen=True)
class SharedTable:
    """A constant stored once for a method and the delegates that read it.

    Attributes:
        method: the method whose program reads it outside a delegate.
        fqn: its state_dict (or constants) key.
        nbytes: the bytes the second copy would have taken.
        file: the external data file that holds it (``<file>.ptd``).
    """

    method: str
    fqn: str
    nbytes: int
    file: str


@dataclass(frozen=True)
class TableStoredTwice:
    """A constant the program stores for an op outside every delegate and a delegate
    stores again as a linear's weight: ``tie_tables=True`` stores it once, in a data file
    the ``.pte`` then loads with.

    Attributes:
        method: the method whose program reads it outside a delegate.
        fqn: its state_dict (or constants) key.
        nbytes: the bytes storing it once would save.
    """

    method: str
    fqn: str
    nbytes: int


@dataclass(frozen=True)
class TableCopies:
    """What `table_copies` found: the tables stored once, and those stored twice."""

    shared: tuple[SharedTable, ...] = ()
    stored_twice: tuple[TableStoredTwice, ...] = ()


# Where a copy is stored: the external data file's tag, or None for the .pte.
_Location = Optional[str]


def _sha256(tensor: torch.Tensor) -> str:
    # Flattened first: a 0-d tensor has no byte view.
    data = tensor.detach().contiguous().reshape(-1)
    return hashlib.sha256(data.view(torch.uint8).numpy().tobytes()).hexdigest()


def _lowered_modules(ep: ExportedProgram) -> Iterator[object]:
    for node in ep.graph.nodes:
        if node.op == "call_function" and node.target is executorch_call_delegate:
            yield getattr(ep.graph_module, str(node.args[0].target))


def _delegate_keys(ep: ExportedProgram) -> dict[str, set[str]]:
    """External file -> the named-data keys ``ep``'s delegates store in it."""
    keys: dict[str, set[str]] = {}
    for lowered in _lowered_modules(ep):
        output = getattr(lowered, "named_data_store_output", None)
        if output is not None:
            for file, entries in output.external_data.items():
                keys.setdefault(file, set()).update(entries)
    return keys


_Signature = tuple[tuple[int, ...], torch.dtype]


def _signature(tensor: torch.Tensor) -> _Signature:
    return tuple(tensor.shape), tensor.dtype


def _delegate_weights(ep: ExportedProgram, wanted: set[_Signature]) -> dict[str, set[_Location]]:
    """SHA-256 -> where ``ep``'s delegates store a constant that only linears read, as
    their own weight (so stored as the program holds it), left out when a delegate also
    reads those bytes otherwise (``tie_tables=True`` keeps such a table twice, XNF517).
    Only constants of a shape and dtype in ``wanted`` are hashed: the others match no copy
    of the program's."""
    found: dict[str, set[_Location]] = {}
    read_otherwise: set[str] = set()
    for lowered in _lowered_modules(ep):
        inner = getattr(lowered, "original_module", None)
        output = getattr(lowered, "named_data_store_output", None)
        if not isinstance(inner, ExportedProgram) or output is None:
            continue
        fqns = constant_fqns(inner)
        for node in inner.graph.nodes:
            fqn = fqns.get(node.name) if node.op == "placeholder" else None
            tensor = constant_tensor(inner, fqn) if fqn is not None else None
            if tensor is None or _signature(tensor) not in wanted:
                continue
            key = _sha256(tensor)
            if not read_only_as_linear_weight(node):
                read_otherwise.add(key)
                continue
            places = found.setdefault(key, set())
            if key in output.pte_data:
                places.add(None)
            places.update(file for file, entries in output.external_data.items() if key in entries)
    return {key: places for key, places in found.items() if key not in read_otherwise}


def _program_copies(ep: ExportedProgram) -> Iterator[tuple[str, torch.Tensor, _Location]]:
    """(fqn, tensor, where) of each constant ``ep`` stores for an op outside every
    delegate."""
    fqns = constant_fqns(ep)
    for node in ep.graph.nodes:
        fqn = fqns.get(node.name) if node.op == "placeholder" else None
        tensor = constant_tensor(ep, fqn) if fqn is not None else None
        if tensor is None or all(user.target is executorch_call_delegate for user in node.users):
            continue
        yield fqn, tensor, external_tag(node)  # type: ignore[misc]


def table_copies(program: Program, *, file: str = EXTERNAL_CONSTANT_TAG) -> TableCopies:
    """The constants ``program`` stores once in ``file`` for itself and its delegates,
    and those it stores twice that ``tie_tables=True`` would store once.

    Tables shared across methods are listed under each method that reads them outside a
    delegate; `ExplainReport` counts each table once.
    """
    programs = list(methods(program))
    copies = [(method, *copy) for method, ep in programs for copy in _program_copies(ep)]
    wanted = {_signature(tensor) for _, _, tensor, _ in copies}
    keys: set[str] = set()
    weights: dict[str, set[_Location]] = {}
    for _, ep in programs:
        keys |= _delegate_keys(ep).get(file, set())
        for key, places in _delegate_weights(ep, wanted).items():
            weights.setdefault(key, set()).update(places)
    shared: list[SharedTable] = []
    twice: list[TableStoredTwice] = []
    for method, fqn, tensor, where in copies:
        if not weights and (where != file or not keys):
            continue  # nothing to compare its bytes with
        key = _sha256(tensor)
        nbytes = tensor.numel() * tensor.element_size()
        if where == file and key in keys:
            shared.append(SharedTable(method, fqn, nbytes, file))
        elif any(place is None or place != where for place in weights.get(key, ())):
            twice.append(TableStoredTwice(method, fqn, nbytes))
    return TableCopies(tuple(shared), tuple(twice))
