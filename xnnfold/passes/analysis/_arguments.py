"""Which GEMM arguments XNNPACK can compute, shared by the partitioner's two checks.

The XNNPACK serializer reads a fixed set of arguments from each GEMM. An addmm becomes a
fully-connected op, ``x @ W + b`` with one bias value per output channel: it has no slot
for ``beta`` or ``alpha`` and no broadcast bias. A transposed convolution becomes a
deconvolution whose adjustment (PyTorch's ``output_padding``) must be smaller than its
stride, while PyTorch also allows one smaller than the dilation. A 1D convolution's
kernel is reshaped in place by XNNPACK's Conv1dUnsqueezePass, so any other reader of
the same constant in the delegate reads a tensor of the wrong rank. And XNNPACK's
ConvertToLinearPass turns ``mm(x, permute(W))`` into ``linear(x, W)`` for any permute,
so a weight computed at run time as an identity permute (``W.permute(0, 1)``) becomes
``x @ W.T``. executorch's stock
configs accept all of these and the delegate then computes something else, or fails to
load. These rules run on the ATen graph (which ops to keep undecomposed) and on the edge
graph (what to delegate), so both always agree.
"""

from __future__ import annotations

from typing import Callable, cast, Optional, Sequence

import torch
from torch.fx import Node
from torch.fx.experimental.symbolic_shapes import free_symbols

from xnnfold._meta import VAL_META_KEY
from xnnfold.passes._ops import CONVOLUTION_TARGETS, EDGE_PERMUTE, EDGE_TRANSPOSES
from xnnfold.passes._reason_codes import (
    ADDMM_BIAS_SHAPE,
    ADDMM_SCALES,
    OUTPUT_PADDING,
    PERMUTED_WEIGHT,
    Problem,
    SHARED_KERNEL,
)

__all__ = [
    "ADDMM_BIAS",
    "ADDMM_WEIGHT",
    "addmm_problem",
    "addmm_scales",
    "deconvolution_problem",
    "is_matrix_transpose",
    "permuted_weight_problem",
    "shared_kernel_problem",
]

# addmm(input, mat1, mat2, *, beta, alpha), in ATen and in the edge dialect alike.
ADDMM_BIAS = 0
ADDMM_WEIGHT = 2
_SCALE_OF = {ADDMM_BIAS: "beta", ADDMM_WEIGHT: "alpha"}


def _number(value: object) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def addmm_scales(node: Node) -> dict[int, float]:
    """{argument index: factor} for addmm's beta (bias) and alpha (weight) other than 1."""
    factors = {i: _number(node.kwargs.get(name, 1)) for i, name in _SCALE_OF.items()}
    return {i: f for i, f in factors.items() if f is not None and f != 1.0}


def addmm_problem(
    node: Node,
    *,
    fold: bool,
    force_non_static_weights: bool,
    constant_or_foldable: Callable[[int], bool],
) -> Optional[Problem]:
    """Why XNNPACK's fully-connected op cannot compute this addmm, or None.

    ``beta``/``alpha`` other than 1 are computable only by folding them into the bias and
    weight, so each scaled argument must be a constant or a foldable computation of
    constants (``constant_or_foldable(index)``).
    """
    for name in _SCALE_OF.values():
        if name in node.kwargs and _number(node.kwargs[name]) is None:
            return Problem(ADDMM_SCALES, f"addmm's {name}={node.kwargs[name]!r} is not a number")
    bias = node.args[ADDMM_BIAS]
    bias_val = bias.meta.get(VAL_META_KEY) if isinstance(bias, Node) else None
    out_val = node.meta.get(VAL_META_KEY)
    if not isinstance(bias_val, torch.Tensor) or not isinstance(out_val, torch.Tensor):
        return Problem(ADDMM_BIAS_SHAPE, "addmm's bias or output has no known shape")
    shape, channels = tuple(bias_val.shape), out_val.shape[-1]
    # A size that depends on the inputs is never known to be one value per channel (and
    # comparing it would specialize the program's symbols).
    static = not free_symbols(bias_val) and isinstance(channels, int)
    if not static or shape not in ((channels,), (1, channels)):
        return Problem(
            ADDMM_BIAS_SHAPE,
            f"addmm's bias has shape {list(shape)}; XNNPACK adds one value per output "
            f"channel (shape [{channels}] or [1, {channels}])",
        )
    scales = addmm_scales(node)
    if not scales:
        return None
    if not fold:
        return Problem(
            ADDMM_SCALES,
            "addmm has beta/alpha other than 1, which XNNPACK can only apply by folding "
            "them into the weight and bias, and folding is off (fold=False)",
        )
    if force_non_static_weights:
        return Problem(
            ADDMM_SCALES,
            "addmm has beta/alpha other than 1, which XNNPACK cannot apply to a weight "
            "or bias supplied at run time (force_non_static_weights_for_f32_linear)",
        )
    for index, factor in scales.items():
        if not constant_or_foldable(index):
            role = "bias" if index == ADDMM_BIAS else "weight"
            return Problem(
                ADDMM_SCALES,
                f"addmm has {_SCALE_OF[index]}={factor:g}, which XNNPACK can only apply "
                f"by folding it into the {role}, and the {role} is not a constant or a "
                "foldable computation of constants",
            )
    return None


def deconvolution_problem(
    *, transposed: bool, stride: Sequence[int], output_padding: Sequence[int]
) -> Optional[Problem]:
    """Why XNNPACK's deconvolution cannot take these arguments, or None."""
    if not transposed:
        return None
    strides = list(stride) * (len(output_padding) if len(stride) == 1 else 1)
    for adjustment, step in zip(output_padding, strides):
        if adjustment >= step:
            return Problem(
                OUTPUT_PADDING,
                f"the transposed convolution has output_padding {list(output_padding)} "
                f"not below its stride {list(stride)}; XNNPACK's deconvolution needs "
                "output_padding < stride",
            )
    return None


def is_matrix_transpose(node: Node) -> bool:
    """Whether edge ``node`` transposes a matrix: a ``t_copy``, or a ``permute_copy`` of a
    2-D value with dims (1, 0) in any spelling."""
    if node.op != "call_function" or node.target not in EDGE_TRANSPOSES:
        return False
    val = node.meta.get(VAL_META_KEY)
    if not isinstance(val, torch.Tensor) or val.dim() != 2:
        return False
    return node.target is not EDGE_PERMUTE or [
        int(d) % 2 for d in cast(Sequence[int], node.args[1])
    ] == [1, 0]


def permuted_weight_problem(node: Node, weight_index: int, *, folded: bool) -> Optional[Problem]:
    """Why an edge mm or addmm whose weight is a permute that is not a transpose cannot
    be delegated with that permute (``folded``: the weight is folded, so the delegate
    sees a constant instead), or None.

    The stock configs reach this only with force_non_static_weights_for_f32_linear; the
    folding configs also when they delegate a GEMM whose computed weight stays computed
    at run time (folding it would grow the program).
    """
    weight = node.args[weight_index] if weight_index < len(node.args) else None
    if (
        folded
        or not isinstance(weight, Node)
        or weight.target is not EDGE_PERMUTE
        or is_matrix_transpose(weight)
    ):
        return None
    return Problem(
        PERMUTED_WEIGHT,
        f"its weight '{weight.name}' is a permute with dims "
        f"{list(cast(Sequence[int], weight.args[1]))}, which is "
        "not a transpose, and it is computed at run time: XNNPACK's ConvertToLinearPass "
        "reads any permute before an mm as a transpose and would compute x @ W.T",
    )


def shared_kernel_problem(node: Node, weight_index: int) -> Optional[Problem]:
    """Why a convolution's stored kernel cannot be delegated: something else reads it.

    Conv1dUnsqueezePass unsqueezes a 1D kernel constant in place: a second convolution
    on it fails in lowering, an elementwise op on it fails at run time (a tensor of rank
    4 where 3 was serialized). A 2D kernel that a non-convolution also reads is computed
    wrongly by XNNPACK or fails at run time (measured with the stock partitioner on
    executorch 1.5.1: ``conv2d(x, w)`` beside ``w.abs().sum()`` is off by 30, beside ``-w``
    execution fails); two convolutions on one 2D kernel are fine.
    """
    weight = node.args[weight_index] if weight_index < len(node.args) else None
    if not isinstance(weight, Node) or weight.op != "placeholder":
        return None
    val = weight.meta.get(VAL_META_KEY)
    if not isinstance(val, torch.Tensor) or val.dim() < 3:
        return None
    one_d = val.dim() == 3
    others = [
        user.name
        for user in weight.users
        if user is not node and (one_d or user.target not in CONVOLUTION_TARGETS)
    ]
    if not others:
        return None
    if one_d:
        return Problem(
            SHARED_KERNEL,
            f"the 1D convolution's kernel '{weight.name}' is also read by '{others[0]}'; "
            "XNNPACK reshapes a 1D kernel in place (Conv1dUnsqueezePass), which breaks "
            "every other reader",
        )
    return Problem(
        SHARED_KERNEL,
        f"the convolution's kernel '{weight.name}' is also read by '{others[0]}', which "
        "is not a convolution; XNNPACK computes such a convolution wrongly",
    )
