"""The private program XNNPACK preprocess gets for a delegate xnnfold partitioned, sharing
its constants.

executorch (where `BackendDetails.copy_exported_program_for_preprocess` exists) deep-copies
every delegate's program, constants included, before it preprocesses any, and keeps the
copies until the last delegate is done. At the end of a lowering it therefore holds every
delegated constant twice beside every delegate's serialized bytes: that is a stock
lowering's peak. xnnfold delegates more than stock (the sources of computed weights, and
GEMMs stock leaves on portable, such as a SwinV2 qkv projection whose bias is computed),
so with stock's copies its peak would be higher by those constants and their bytes.

The copy made here is the same deep copy, but each constant tensor in it is a new tensor
object over the original's storage, so xnnfold's lowering holds its delegated constants
once. That is safe because nothing in preprocess writes into a constant's storage:
XNNPACK's passes and xnnfold's fold replace a constant by a new tensor (a new `state_dict`
entry, a new placeholder) and serialize by reading; a pass that rebinds a tensor's `.data`
rebinds the copy's object, never the original's.
`tests/passes/fold/test_shared_copy.py` lowers fixtures whose preprocess reshapes, fuses,
transposes and casts constants and checks that the original's keep every bit.

Which programs: those whose nodes carry a tag of xnnfold's partitioner
(`XNNFOLD_TAG_PREFIX`, `partitioned_by_xnnfold`). A delegate any other partitioner
tagged gets the copy it would get without xnnfold.
"""

from __future__ import annotations

import copy
from typing import Any, Optional

import torch
from torch import nn
from torch.export import ExportedProgram

from xnnfold._meta import DELEGATION_TAG_META_KEY, XNNFOLD_TAG_PREFIX

__all__ = ["copy_sharing_constants", "partitioned_by_xnnfold"]


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


def partitioned_by_xnnfold(ep: ExportedProgram) -> bool:
    """True when some node of ``ep`` carries a delegation tag xnnfold's partitioner wrote
    (`XNNFOLD_TAG_PREFIX`): ``ep`` is a delegate xnnfold partitioned."""
    for node in ep.graph.nodes:
        tag = node.meta.get(DELEGATION_TAG_META_KEY)
        if isinstance(tag, str) and tag.startswith(XNNFOLD_TAG_PREFIX):
            return True
    return False
