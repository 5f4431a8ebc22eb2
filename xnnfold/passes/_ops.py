"""The op sets and GEMM tables the partitioner configs and the fold pass share.

Which ops the fold may evaluate, which it must not, where each GEMM keeps its weight and
bias in ATen and in the edge dialect, and what executorch decomposes each kept op into.
Deciding "foldable" and folding read the same tables, so a GEMM or op added in one place
is added for both. The node-metadata keys are in `xnnfold._meta`.
"""

from __future__ import annotations

import operator
from typing import Final

import torch

from xnnfold._upstream import aten_op_of, exir_ops

__all__ = [
    "ASSERTION_OPS",
    "ATEN_GEMM_ARGS",
    "DEFAULT_MAX_FOLD_NODES",
    "EDGE_ACTIVATION_GEMMS",
    "EDGE_GEMM_ARGS",
    "EDGE_NO_DECOMP_NAMESPACE",
    "SYMBOLIC_SCALAR_OPS",
    "GEMM_ARGS",
    "GEMM_ARGS_BY_NAME",
    "FILL_OPS",
    "FOLDABLE_NAMESPACES",
    "FULLY_CONNECTED_GEMMS",
    "FULLY_CONNECTED_WEIGHT",
    "DECOMPOSES_ONLY_TO",
    "PRESERVE_BLOCKLIST",
    "QUANTIZATION_NAMESPACES",
    "STOCK_WHY_LOGGERS",
    "UNFOLDABLE_OPS",
    "GETITEM",
]

aten = torch.ops.aten
edge = exir_ops.edge.aten

# The loggers the stock XNNPACK configs report `WhyNoPartition` reasons to (at DEBUG).
STOCK_WHY_LOGGERS: Final = (
    "executorch.backends.xnnpack.partition.config.gemm_configs",
    "executorch.backends.xnnpack.partition.config.xnnpack_config",
)

# A weight computation larger than this is declined rather than walked. Every walk is
# iterative and linear, so the bound only caps the work one GEMM can cost; it is far above
# any weight computation in a real model (a few hundred nodes at most).
DEFAULT_MAX_FOLD_NODES: Final = 65536

# Ops of these namespaces are pure tensor functions the fold may evaluate ahead of time
# ("dim_order_ops" holds the edge dialect's clone and to_copy).
FOLDABLE_NAMESPACES: Final = frozenset({"aten", "dim_order_ops"})

GETITEM: Final = operator.getitem

# The namespace executorch moves kept ops into while it decomposes the rest (to_edge).
EDGE_NO_DECOMP_NAMESPACE: Final = "EDGE_DO_NOT_DECOMP"

# Namespaces of the PT2E quantize/dequantize ops (a quantized weight is their output).
QUANTIZATION_NAMESPACES: Final = frozenset({"quantized_decomposed", "torchao"})

# Ops that make a tensor from a fill value alone (WavLM's ``zeros_like(v_bias)`` between the
# q and v biases). The size rule counts what they create as source data: it is part of
# what the computation reads, just stored as a scalar.
FILL_OPS: Final = frozenset(
    {
        aten.full_like,
        aten.zeros_like,
        aten.ones_like,
        aten.full,
        aten.zeros,
        aten.ones,
        aten.new_full,
        aten.new_zeros,
        aten.new_ones,
        aten.scalar_tensor,
    }
)

# Pure by schema but not foldable: their value is not a function of their tensor inputs.
# (`item` and `_local_scalar_dense` are: a scalar read from a constant is a constant.)
UNFOLDABLE_OPS: Final = frozenset(
    {
        aten.empty.memory_format,
        aten.empty_like.default,
        aten.empty_strided.default,
    }
)

# Checks torch.export records on a tensor (its dtype after a `.to()`, a size bound); they
# read a constant but store nothing of it, and to_edge removes them.
ASSERTION_OPS: Final = frozenset(
    {
        aten._assert_tensor_metadata.default,
        aten._assert_scalar.default,
        aten.sym_constrain_range_for_size.default,
    }
)

# Python-level arithmetic torch.export records on the symbolic scalars `.item()` returns
# (`self.w * (self.s.item() * 2)`): pure functions of their operands, evaluated as such.
SYMBOLIC_SCALAR_OPS: Final = frozenset(
    {
        operator.add,
        operator.sub,
        operator.mul,
        operator.truediv,
        operator.neg,
        operator.pow,
        torch.sym_float,
    }
)

# Weight and bias argument positions of each GEMM in the edge dialect (what the XNNPACK
# configs see and what the fold pass rewrites inside a delegate).
EDGE_GEMM_ARGS: Final[dict[object, tuple[int, ...]]] = {
    edge.convolution.default: (1, 2),
    edge.linear.default: (1, 2),
    edge.addmm.default: (2, 0),
    edge.mm.default: (1,),
}

# Matrix products that never have a weight (both operands are activations); `explain`
# lists them beside the GEMMs so a user sees every product that stayed on portable.
EDGE_ACTIVATION_GEMMS: Final = frozenset({edge.bmm.default})

# The same positions by ATen op name, whatever the overload: `explain` also reads programs
# after `to_executorch`, whose GEMMs are out variants (aten::mm.out).
GEMM_ARGS_BY_NAME: Final[dict[str, tuple[int, ...]]] = {
    aten_op_of(op).overloadpacket.__name__: positions
    for op, positions in [
        *EDGE_GEMM_ARGS.items(),
        *((op, ()) for op in EDGE_ACTIVATION_GEMMS),
    ]
}

# The same positions in the ATen graph that `ops_to_not_decompose` inspects, before the
# decompositions turn conv1d into convolution and matmul into mm.
ATEN_GEMM_ARGS: Final[dict[object, tuple[int, ...]]] = {
    aten.convolution.default: (1, 2),
    aten.conv1d.default: (1, 2),
    aten.conv1d.padding: (1, 2),
    aten.conv2d.default: (1, 2),
    aten.conv2d.padding: (1, 2),
    aten.conv_transpose1d.default: (1, 2),
    aten.conv_transpose2d.input: (1, 2),
    aten.linear.default: (1, 2),
    aten.addmm.default: (2, 0),
    aten.mm.default: (1,),
    aten.matmul.default: (1,),
}

# The GEMMs XNNPACK serializes as a fully-connected op (``x @ W + b``), in ATen. It takes
# their fp32 weight computed at run time too, and under
# ``force_non_static_weights_for_f32_linear`` always.
FULLY_CONNECTED_GEMMS: Final = frozenset(
    {aten.linear.default, aten.addmm.default, aten.mm.default, aten.matmul.default}
)
# Their weight positions by op name, which their edge forms and the copies executorch keeps
# out of decomposition share.
FULLY_CONNECTED_WEIGHT: Final[dict[str, int]] = {
    op.overloadpacket.__name__: ATEN_GEMM_ARGS[op][0] for op in FULLY_CONNECTED_GEMMS
}

# Every convolution op, ATen (before to_edge) and edge: the readers of a kernel that
# XNNPACK takes beside a 2D convolution on it (`_arguments.shared_kernel_problem`).
CONVOLUTION_TARGETS: Final[frozenset[object]] = frozenset(
    {op for op, positions in ATEN_GEMM_ARGS.items() if positions == (1, 2)} - {aten.linear.default}
) | {edge.convolution.default}

# The edge permute: before an mm or addmm weight, XNNPACK's ConvertToLinearPass reads it
# as a transpose whatever its dims (`_arguments.permuted_weight_problem`).
EDGE_PERMUTE: Final = edge.permute_copy.default
EDGE_TRANSPOSES: Final = frozenset({EDGE_PERMUTE, edge.t_copy.default})

# Every GEMM the passes look at, ATen or edge, with its weight and bias positions (none for
# a product of two activations). `explain` matches by name instead, for out variants.
GEMM_ARGS: Final[dict[object, tuple[int, ...]]] = {
    **EDGE_GEMM_ARGS,
    **ATEN_GEMM_ARGS,
    **{op: () for op in EDGE_ACTIVATION_GEMMS},
}

# Every op that can appear while executorch's decomposition table rewrites the key, for any
# arguments (the key's own step and, for an op that step produces which the table rewrites
# again, that op's entry too). When every op a graph needs decomposed is a key whose ops are
# none of the kept ones, no kept op can appear during decomposition, so the partitioner's
# per-node filter has nothing new to judge (see `_decompositions.filter_is_redundant`).
# Shape arithmetic (`sym_size`, operators on SymInts) is left out: no partitioner keeps it.
# tests/passes/partition/test_decompositions.py traces each key against the installed torch.
_CONVOLUTION: Final = frozenset({aten.convolution.default})
_MV: Final = frozenset({aten.mul.Tensor, aten.sum.dim_IntList})
_SUM: Final = frozenset({aten.sum.dim_IntList})
_DOT: Final = frozenset({aten.mul.Tensor, aten.sum.default}) | _SUM
_TRANSPOSE: Final = frozenset({aten.permute.default, aten.alias.default})
_SILU: Final = frozenset({aten.mul.Tensor, aten.sigmoid.default, aten._to_copy.default})
# By operand ranks and strides: dot, mv, mm or bmm, with views, expands and copies around.
_MATMUL: Final = frozenset(
    {
        aten.dot.default,
        aten.mv.default,
        aten.mm.default,
        aten.bmm.default,
        aten.view.default,
        aten._unsafe_view.default,
        aten.expand.default,
        aten.clone.default,
        aten.unsqueeze.default,
        aten.squeeze.dim,
        aten.squeeze.dims,
        aten.transpose.int,
    }
    | _MV
    | _DOT
    | _TRANSPOSE
)
DECOMPOSES_ONLY_TO: Final[dict[object, frozenset[object]]] = {
    aten.conv1d.default: _CONVOLUTION,
    aten.conv2d.default: _CONVOLUTION,
    aten.conv3d.default: _CONVOLUTION,
    aten.conv_transpose1d.default: _CONVOLUTION,
    aten.conv_transpose2d.input: _CONVOLUTION,
    aten.conv_transpose3d.input: _CONVOLUTION,
    aten.transpose.int: _TRANSPOSE,
    aten.t.default: frozenset({aten.transpose.int}) | _TRANSPOSE,
    aten._unsafe_view.default: frozenset({aten.view.default}),
    aten.layer_norm.default: frozenset({aten.native_layer_norm.default, GETITEM}),
    aten.softmax.int: frozenset({aten._softmax.default, aten._to_copy.default}),
    aten.square.default: frozenset({aten.pow.Tensor_Scalar}),
    aten.clamp_min.default: frozenset({aten.clamp.default}),
    aten.squeeze.dim: frozenset({aten.squeeze.dims}),
    aten.split.Tensor: frozenset({aten.split_with_sizes.default}),
    aten.mv.default: _MV,
    aten.dot.default: _DOT,
    aten.sum.default: _SUM,
    aten.matmul.default: _MATMUL,
    # By `ord`: sum of powers, max or min of magnitudes, or a count of non-zeros.
    aten.linalg_vector_norm.default: frozenset(
        {
            aten.abs.default,
            aten.pow.Tensor_Scalar,
            aten.sum.dim_IntList,
            aten.amax.default,
            aten.amin.default,
            aten.ne.Scalar,
            aten._to_copy.default,
        }
    ),
    # x * sigmoid(x), computed in fp32 for a half or bfloat16 x.
    aten.silu.default: _SILU,
    # A 1x1 output is a mean (over a restrided channels_last input), any other the ATen
    # kernel (which the table keeps).
    aten.adaptive_avg_pool2d.default: frozenset(
        {aten.mean.dim, aten.as_strided.default, aten._adaptive_avg_pool2d.default}
    ),
}

# Mirrors executorch's own list of ops that break when kept out of decomposition
# (exir/program/_program.py, _remove_invalid_ops_for_not_decompose): asking for them only
# produces warnings, and none of them changes numerics when decomposed.
PRESERVE_BLOCKLIST: Final = frozenset(
    {
        aten._to_copy.default,
        aten.mul.Tensor,
        aten.add.Tensor,
        aten.sub.Tensor,
        aten.div.Tensor,
        aten.item.default,
        aten._local_scalar_dense.default,
        aten.unbind.int,
        aten.split_with_sizes.default,
    }
)
