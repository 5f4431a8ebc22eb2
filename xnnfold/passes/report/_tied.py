"""Which tied tables a lowered program stores once, read from what it will write.

A table is stored once when the program's constant and a delegate's copy land in the same
external data file with the same bytes: the program's placeholder is tagged for the file
(``meta["constant_tag"]``) and a delegate's named data holds, under the same file, the
key XNNPACK derives from those bytes (their SHA-256). Both are read from the artifacts
executorch serializes, so what is reported is what the files hold.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch
from executorch.exir.delegate import executorch_call_delegate
from torch.export import ExportedProgram

from xnnfold._meta import EXTERNAL_CONSTANT_TAG
from xnnfold.passes.analysis import constant_fqns, constant_tensor, external_tag
from xnnfold.passes.report._programs import methods, Program

__all__ = ["SharedTable", "shared_tables"]


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


def _delegate_keys(ep: ExportedProgram, file: str) -> set[str]:
    """The named-data keys ``ep``'s delegates store in ``file``."""
    keys: set[str] = set()
    for node in ep.graph.nodes:
        if node.op != "call_function" or node.target is not executorch_call_delegate:
            continue
        lowered = getattr(ep.graph_module, str(node.args[0].target))
        output = getattr(lowered, "named_data_store_output", None)
        if output is not None:
            keys |= set(output.external_data.get(file, {}))
    return keys


def _sha256(tensor: torch.Tensor) -> str:
    data = tensor.detach().contiguous()
    return hashlib.sha256(data.view(torch.uint8).numpy().tobytes()).hexdigest()


def shared_tables(
    program: Program, *, file: str = EXTERNAL_CONSTANT_TAG
) -> tuple[SharedTable, ...]:
    """The constants ``program`` stores once in ``file`` for itself and its delegates.

    Tables shared across methods are listed under each method that reads them outside a
    delegate; `ExplainReport.bytes_saved` counts each table once.
    """
    programs = list(methods(program))
    keys: set[str] = set()
    for _, ep in programs:
        keys |= _delegate_keys(ep, file)
    if not keys:
        return ()
    found: list[SharedTable] = []
    for method, ep in programs:
        fqns = constant_fqns(ep)
        for node in ep.graph.nodes:
            fqn = fqns.get(node.name) if node.op == "placeholder" else None
            if fqn is None or external_tag(node) != file:
                continue
            tensor = constant_tensor(ep, fqn)
            if isinstance(tensor, torch.Tensor) and _sha256(tensor) in keys:
                found.append(SharedTable(method, fqn, tensor.numel() * tensor.element_size(), file))
    return tuple(found)
