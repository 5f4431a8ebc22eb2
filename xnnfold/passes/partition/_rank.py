"""XNNPACK's largest tensor rank: a group that would give a delegate a larger tensor stays out.

XNNPACK defines no tensor of more than ``XNN_MAX_TENSOR_DIMS`` (6) dimensions: the
runtime's `xnn_define_tensor_value` answers ``xnn_status_unsupported_parameter``, and
``executorch.runtime`` refuses the whole method ("Failed to load method forward"). The
stock configs check only an op's own arguments, never this rank, and preprocess does not
check it either, so an op on a 7-D tensor (the permutes and unsqueezes of an
``einsum`` over six indices, as in UnivNet's location-variable convolution) is delegated
and the program lowers, serializes, and cannot be loaded.

`within_xnnpack_rank` removes from the matched groups every group with a node that
would define such a tensor at run time: its output, or one of its tensor inputs, has
more than six dimensions. Those nodes run on the portable kernels, as every op XNNPACK
does not take does. A node of a folded weight computation is exempt: the fold pass
evaluates it at preprocess, and only its result, a GEMM weight of at most 4 dimensions,
reaches XNNPACK.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Optional, Sequence

import torch
from executorch.backends.xnnpack.utils.xnnpack_constants import XNN_MAX_TENSOR_DIMS
from torch.fx import Node

from xnnfold._meta import VAL_META_KEY
from xnnfold.passes._graph_walk import walk

__all__ = ["XNN_MAX_TENSOR_DIMS", "over_rank", "within_xnnpack_rank"]


def _ranks(value: object) -> Iterable[int]:
    if isinstance(value, torch.Tensor):
        yield value.dim()
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _ranks(item)


def over_rank(node: Node) -> bool:
    """Whether ``node`` reads or produces a tensor of more than ``XNN_MAX_TENSOR_DIMS``
    dimensions (its output, or the value of a node among its arguments)."""
    values = [node.meta.get(VAL_META_KEY)]
    values += [arg.meta.get(VAL_META_KEY) for arg in node.all_input_nodes]
    return any(rank > XNN_MAX_TENSOR_DIMS for value in values for rank in _ranks(value))


def _folded_nodes(
    groups: Sequence[Sequence[Node]], folds: Mapping[str, Mapping[int, Optional[str]]]
) -> set[Node]:
    """The nodes of the weight computations a GEMM of ``groups`` folds (``folds``, by
    GEMM name: the matching's accepted folds): evaluated
    at preprocess, so no tensor of theirs reaches XNNPACK's runtime. A marked argument's
    computation reads constants only (the configs mark nothing else), so it is every
    node above the argument up to the placeholders."""
    roots = [
        gemm.args[index]
        for group in groups
        for gemm in group
        for index in folds.get(gemm.name, {})
        if index < len(gemm.args)
    ]
    return set(
        walk(
            [root for root in roots if isinstance(root, Node)],
            lambda node: [arg for arg in node.all_input_nodes if arg.op != "placeholder"],
        )
    )


def within_xnnpack_rank(
    groups: list[list[Node]], folds: Mapping[str, Mapping[int, Optional[str]]]
) -> list[list[Node]]:
    """``groups`` without those holding a node that would define a tensor of more than
    ``XNN_MAX_TENSOR_DIMS`` dimensions in a delegate (`over_rank`, outside a folded
    weight computation). A whole group goes: its nodes were matched to be delegated
    together (a GEMM with its weight, a fused pattern). ``groups`` itself when none does,
    so a program without such tensors partitions exactly as before."""
    candidates = [
        node for group in groups for node in group if node.op == "call_function" and over_rank(node)
    ]
    if not candidates:
        return groups
    folded = _folded_nodes(groups, folds)
    oversized = {node for node in candidates if node not in folded}
    if not oversized:
        return groups
    return [group for group in groups if not oversized.intersection(group)]
