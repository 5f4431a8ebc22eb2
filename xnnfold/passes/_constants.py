"""Names shared by the rewriter, the partitioner configs and the fold pass.

The two halves of xnnfold talk through node metadata: `prepare_for_xnnpack` marks the nodes
that compute a parametrized tensor (`SITE_META_KEY` inside `node.meta["custom"]`, which
`torch.export` and the `to_edge` decompositions carry over), and the folding partitioner
marks each GEMM it accepted with a computed weight or bias (`FOLD_META_KEY`). Keeping every
key, op set and table here means a rename cannot leave one half behind.
"""

from __future__ import annotations

import operator
from typing import Final

import torch
from executorch.exir.dialects._ops import ops as exir_ops

__all__ = [
    "ATEN_GEMM_ARGS",
    "CUSTOM_META_KEY",
    "DEFAULT_MAX_FOLD_NODES",
    "EDGE_GEMM_ARGS",
    "FOLD_META_KEY",
    "FOLDABLE_NAMESPACES",
    "PRESERVE_BLOCKLIST",
    "PRESERVED_META_KEY",
    "SITE_META_KEY",
    "UNFOLDABLE_OPS",
    "GETITEM",
]

aten = torch.ops.aten
edge = exir_ops.edge.aten

# torch.fx.traceback.annotate writes into node.meta["custom"]; export and the edge
# decompositions copy that dict onto every node they derive from a marked one.
CUSTOM_META_KEY: Final = "custom"
# Inside node.meta["custom"]: "<module path>.<tensor name>" of the parametrized tensor.
SITE_META_KEY: Final = "xnnfold_site"
# On a GEMM node the folding partitioner accepted: {arg index: site or None} to fold.
FOLD_META_KEY: Final = "xnnfold_fold"
# On an ATen node the partitioner asked executorch not to decompose.
PRESERVED_META_KEY: Final = "xnnfold_preserved"

# A weight computation larger than this is declined rather than walked: the walk must stay
# bounded even on graphs whose weights are computed by long chains.
DEFAULT_MAX_FOLD_NODES: Final = 4096

# Ops of these namespaces are pure tensor functions the fold may evaluate ahead of time
# ("dim_order_ops" holds the edge dialect's clone and to_copy).
FOLDABLE_NAMESPACES: Final = frozenset({"aten", "dim_order_ops"})

GETITEM: Final = operator.getitem

# Pure by schema but not foldable: their value is not a function of their tensor inputs.
UNFOLDABLE_OPS: Final = frozenset(
    {
        aten.empty.memory_format,
        aten.empty_like.default,
        aten.empty_strided.default,
        aten.item.default,
        aten._local_scalar_dense.default,
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
