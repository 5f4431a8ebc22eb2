"""The private program XNNPACK preprocess gets for a marked delegate, sharing its constants.

executorch (where `BackendDetails.copy_exported_program_for_preprocess` exists) deep-copies
every delegate's program, constants included, before it preprocesses any, and keeps the
copies until the last delegate is done. A stock lowering delegates only static weights,
whose bytes it copies; xnnfold also delegates the sources of computed weights, which
stock leaves outside every delegate, so the copies would hold every source of the model
once more: on a model whose every convolution weight is computed (NFNets), a whole second
set of parameters at the lowering's peak.

The copy made here is the same deep copy, but each constant tensor in it is a new tensor
object over the original's storage. That is safe because nothing in preprocess writes
into a constant's storage: XNNPACK's passes and xnnfold's fold replace a constant by a new
tensor (a new `state_dict` entry, a new placeholder) and serialize by reading; a pass that
rebinds a tensor's `.data` rebinds the copy's object, never the original's.
`tests/passes/fold/test_shared_copy.py` lowers fixtures whose preprocess reshapes, fuses,
transposes and casts constants and checks that the original's keep every bit.
"""

from __future__ import annotations

import copy
from typing import Any, Optional

import torch
from torch import nn
from torch.export import ExportedProgram

__all__ = ["copy_sharing_constants"]


def _alias(value: Any) -> Optional[torch.Tensor]:
    """A new tensor object over ``value``'s storage, or None for anything that is not a
    plain tensor or parameter (a subclass or a script object is deep-copied as before)."""
    if type(value) is nn.Parameter:
        return nn.Parameter(value.detach(), requires_grad=value.requires_grad)
    if type(value) is torch.Tensor:
        return value.detach()
    return None


def copy_sharing_constants(ep: ExportedProgram) -> ExportedProgram:
    """A deep copy of ``ep`` whose constants (`state_dict`, `constants`) are new tensor
    objects over ``ep``'s storage: graph, signature and metadata are copied as
    `copy.deepcopy` copies them, constant bytes are not."""
    memo: dict[int, Any] = {}
    for value in (*ep.state_dict.values(), *ep.constants.values()):
        alias = _alias(value)
        if alias is not None:
            memo[id(value)] = alias
    return copy.deepcopy(ep, memo)
