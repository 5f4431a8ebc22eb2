"""When two weight computations fold to the same bytes: a hashable structure per node
(the same ops on the same sources), so the fold stores one constant for both and the size
rule counts it once."""

from __future__ import annotations

from typing import Optional

import torch
from torch.export import ExportedProgram
from torch.fx import Node

from xnnfold._meta import VAL_META_KEY
from xnnfold._upstream import (
    is_fake,
    overload_name_of,
    real_value_of_fake,
    schema_of,
    unset_fake_temporarily,
)
from xnnfold.passes.analysis._cache import AnalysisCache, ConstantMap
from xnnfold.passes.analysis._constants import constant_map
from xnnfold.passes.analysis._nodes import constant_tensor, op_overload
from xnnfold.passes.analysis._results import WeightComputation

__all__ = ["computation_key", "structure"]


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


def _small_constant(ep: ExportedProgram, cmap: ConstantMap, node: Node) -> Optional[torch.Tensor]:
    val = node.meta.get(VAL_META_KEY)
    if not isinstance(val, torch.Tensor) or val.numel() > _MAX_VALUE_KEY_NUMEL:
        return None
    # Scalars lifted by to_edge are non-persistent buffers; either way, only values the
    # program never writes can stand for each other (the per-graph sweep, ``cmap``, knows
    # which).
    if not cmap.constant.get(node.name, False):
        return None
    # The sweep's snapshot of the signature: torch's is_buffer/get_buffer rebuild the
    # name -> FQN dicts per call, quadratic over a chain of thousands of lifted scalars.
    fqn = cmap.fqns.get(node.name)
    value = None if fqn is None else constant_tensor(ep, fqn)
    if isinstance(value, torch.Tensor) and is_fake(value):
        # Under a decomposition's fake mode a small constant keeps its real value here.
        value = real_value_of_fake(value)
    return value if isinstance(value, torch.Tensor) and not is_fake(value) else None


def _value_key(value: torch.Tensor) -> tuple[object, ...]:
    # Read outside any fake mode the caller (a decomposition) may have active.
    with unset_fake_temporarily():
        items = tuple(value.detach().flatten().tolist())
    return ("value", str(value.dtype), tuple(value.shape), items)


# The program a structure is read in, with its constant map: small lifted constants are
# then compared by value (without it, by name).
Program = tuple[ExportedProgram, ConstantMap]


def structure(node: Node, memo: dict[Node, object], program: Optional[Program] = None) -> object:
    """A hashable description of what ``node`` computes from which sources: two weight
    computations with the same structure fold to the same bytes, stored once."""
    if node in memo:
        return memo[node]
    if node.op == "placeholder":
        value = _small_constant(*program, node) if program is not None else None
        key: object = _value_key(value) if value is not None else ("source", node.name)
    else:

        def describe(arg: object) -> object:
            if isinstance(arg, Node):
                return structure(arg, memo, program)
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


def computation_key(
    computation: WeightComputation,
    memo: dict[Node, object],
    ep: Optional[ExportedProgram] = None,
    *,
    cache: Optional[AnalysisCache] = None,
) -> object:
    """Equal keys mean equal folded values (same ops on the same sources), so the fold
    can reuse one constant for a module called twice. ``memo`` is shared across calls;
    ``cache`` holds ``ep``'s sweep."""
    program = (ep, constant_map(ep, cache=cache)) if ep is not None else None
    for node in (*computation.sources, *computation.nodes):
        structure(node, memo, program)  # inputs first, so the recursion stays one level deep
    return memo[computation.root]
