"""`XnnpackFoldingPartitioner`: the stock XNNPACK partitioner plus computed GEMM weights.

A drop-in replacement for `XnnpackPartitioner`. Its GEMM configs also accept a weight or
bias computed from parameters, unmutated buffers or constants (see `_configs.py`), and it
keeps the ATen ops of those computations undecomposed (`_weight_norm`, `mv`, `vdot`, ...)
so the fold evaluates exactly the kernels eager PyTorch runs: the folded weight is
bit-for-bit the weight a hand-folded model holds. On a graph without computed weights it
partitions exactly as the stock partitioner does.
"""

from __future__ import annotations

import functools
import logging
import weakref
from typing import Callable, Optional, Sequence, Type, Union

import torch
from executorch.backends.xnnpack.partition.config import ALL_PARTITIONER_CONFIGS
from executorch.backends.xnnpack.partition.config.xnnpack_config import (
    ConfigPrecisionType,
    XNNPartitionerConfig,
)
from executorch.backends.xnnpack.partition.xnnpack_partitioner import (
    XnnpackPartitioner,
)
from executorch.exir.backend.partitioner import PartitionResult
from torch.export import ExportedProgram
from torch.fx import Graph, Node

from xnnfold.passes._configs import FOLDING_GEMM_CONFIGS, FoldingGEMMMixin
from xnnfold.passes._constants import (
    ATEN_GEMM_ARGS,
    CUSTOM_META_KEY,
    DEFAULT_MAX_FOLD_NODES,
    FOLD_META_KEY,
    PRESERVE_BLOCKLIST,
    PRESERVED_META_KEY,
)
from xnnfold.passes._hook import install_preprocess_hook
from xnnfold.passes._predicates import (
    find_weight_computation,
    op_overload,
    Rejection,
    WeightComputation,
)

__all__ = ["XnnpackFoldingPartitioner", "folding_configs"]

logger = logging.getLogger(__name__)


def folding_configs(
    configs: Sequence[Type[XNNPartitionerConfig]],
) -> list[Type[XNNPartitionerConfig]]:
    """``configs`` with each stock GEMM config replaced by its folding version."""
    return [FOLDING_GEMM_CONFIGS.get(config, config) for config in configs]


@functools.lru_cache(maxsize=1)
def _decomposed_ops() -> frozenset[torch._ops.OpOverload]:
    # The table to_edge_transform_and_lower decomposes with; only ops in it need keeping.
    from executorch.exir.program._program import _default_decomposition_table

    return frozenset(
        op
        for op in _default_decomposition_table()
        if isinstance(op, torch._ops.OpOverload)
    )


def _keepable(op: torch._ops.OpOverload) -> bool:
    """Ops executorch can keep out of decomposition (no mutation, no aliasing)."""
    if op in PRESERVE_BLOCKLIST or op not in _decomposed_ops():
        return False
    schema = op._schema
    return not schema.is_mutable and all(r.alias_info is None for r in schema.returns)


def _float32(node: object) -> bool:
    val = node.meta.get("val") if isinstance(node, Node) else None
    return isinstance(val, torch.Tensor) and val.dtype == torch.float32


def _aten_gemm_delegable(node: Node) -> bool:
    """The ATen-level part of the XNNPACK GEMM checks that a computed weight can't pass.

    Keeping an op undecomposed is only safe if its GEMM is then delegated: an undelegated
    `_weight_norm` would need a portable kernel that does not exist.
    """
    weight = node.args[ATEN_GEMM_ARGS[node.target][0]]
    if not isinstance(weight, Node) or not _float32(weight):
        return False
    rank = weight.meta["val"].dim()
    activation = node.args[1] if node.target is torch.ops.aten.addmm.default else node.args[0]
    if not _float32(activation):
        return False
    if node.target in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default):
        return rank == 2
    if node.target is torch.ops.aten.matmul.default:
        return rank == 2 and activation.meta["val"].dim() >= 2
    if node.target is torch.ops.aten.linear.default:
        return rank == 2
    return rank in (3, 4)  # convolutions: XNNPACK takes 1D and 2D


# Keyed by node name, not Node: a Node refers to its graph and would keep the weak key alive.
_PRESERVED: "weakref.WeakKeyDictionary[Graph, tuple[int, dict[str, torch._ops.OpOverload]]]" = (
    weakref.WeakKeyDictionary()
)


def _preserved_nodes(
    ep: ExportedProgram, max_nodes: int
) -> dict[str, torch._ops.OpOverload]:
    """Names of the nodes of foldable weight computations whose op the decompositions
    would change."""
    graph = ep.graph
    cached = _PRESERVED.get(graph)
    if cached is not None and cached[0] == len(graph.nodes):
        return cached[1]
    preserved: dict[str, torch._ops.OpOverload] = {}
    for node in graph.nodes:
        positions = ATEN_GEMM_ARGS.get(node.target) if node.op == "call_function" else None
        if positions is None or not _aten_gemm_delegable(node):
            continue
        for index in positions:
            result = find_weight_computation(
                node, index, ep, arg_positions=positions, max_nodes=max_nodes
            )
            if not isinstance(result, WeightComputation):
                continue
            for member in result.nodes:
                op = op_overload(member.target)
                if op is not None and _keepable(op):
                    preserved[member.name] = op
    _PRESERVED[graph] = (len(graph.nodes), preserved)
    return preserved


class XnnpackFoldingPartitioner(XnnpackPartitioner):
    """`XnnpackPartitioner` whose GEMMs also take weights computed from parameters.

    Every convolution (1D/2D, depthwise, transposed), linear, addmm and mm whose fp32 weight
    or bias is computed from parameters, unmutated buffers or constants through pure ATen
    ops is delegated together with that computation, which XNNPACK preprocess then folds
    into a constant of the delegate. The top-level program is not rewritten.

    Args:
        configs: partitioner config classes (default: all of XNNPACK's); stock GEMM
            configs among them are replaced by their folding versions.
        config_precisions: as for `XnnpackPartitioner`.
        per_op_mode: as for `XnnpackPartitioner`.
        verbose: as for `XnnpackPartitioner`.
        force_non_static_weights_for_f32_linear: as for `XnnpackPartitioner`.
        enable_bf16: as for `XnnpackPartitioner`.
        fold: False turns folding off (the stock partitioner's behaviour).
        max_fold_nodes: the largest weight computation to fold.

    Example::

        model = prepare_for_xnnpack(model.eval())
        ep = torch.export.export(model, example_inputs)
        et = to_edge_transform_and_lower(
            ep, partitioner=[XnnpackFoldingPartitioner()]
        ).to_executorch()
    """

    def __init__(
        self,
        configs: Optional[list[Type[XNNPartitionerConfig]]] = None,
        config_precisions: Optional[
            Union[ConfigPrecisionType, list[ConfigPrecisionType]]
        ] = None,
        per_op_mode: bool = False,
        verbose: bool = False,
        *,
        force_non_static_weights_for_f32_linear: bool = False,
        enable_bf16: bool = False,
        fold: bool = True,
        max_fold_nodes: int = DEFAULT_MAX_FOLD_NODES,
    ) -> None:
        if max_fold_nodes < 1:
            raise ValueError(
                f"XnnpackFoldingPartitioner: max_fold_nodes must be >= 1, got {max_fold_nodes}"
            )
        super().__init__(
            folding_configs(configs or ALL_PARTITIONER_CONFIGS),
            config_precisions,
            per_op_mode,
            verbose,
            force_non_static_weights_for_f32_linear=force_non_static_weights_for_f32_linear,
            enable_bf16=enable_bf16,
        )
        self.fold = fold
        self.max_fold_nodes = max_fold_nodes
        self.rejections: dict[tuple[Node, int], Rejection] = {}
        for config in self.target_partitioner_configs.values():
            if isinstance(config, FoldingGEMMMixin):
                config.fold = fold
                config.max_fold_nodes = max_fold_nodes
                config.rejections = self.rejections

    def ops_to_not_decompose(
        self, ep: ExportedProgram
    ) -> tuple[list[torch._ops.OpOverload], Optional[Callable[[Node], bool]]]:
        ops, stock_filter = super().ops_to_not_decompose(ep)
        if not self.fold:
            return ops, stock_filter
        graph = ep.graph
        preserved = _preserved_nodes(ep, self.max_fold_nodes)
        extra = sorted(set(preserved.values()) - set(ops), key=str)

        def filter_fn(node: Node) -> bool:
            # Names are unique per graph only: nodes of control-flow submodules may reuse them.
            if node.graph is graph and node.name in preserved:
                # Recorded in "custom", the one meta dict the decompositions carry over, so
                # partition() can check every kept op ended up in a delegate.
                custom = dict(node.meta.get(CUSTOM_META_KEY) or {})
                custom[PRESERVED_META_KEY] = True
                node.meta[CUSTOM_META_KEY] = custom
                return True
            return stock_filter(node) if stock_filter is not None else False

        return [*ops, *extra], filter_fn

    def partition(self, exported_program: ExportedProgram) -> PartitionResult:
        self.rejections.clear()
        result = super().partition(exported_program)
        if self.fold:
            graph = exported_program.graph
            if any(FOLD_META_KEY in node.meta for node in graph.nodes):
                install_preprocess_hook()
            self._check_preserved_were_delegated(exported_program)
            self._report_rejections()
        return result

    def _check_preserved_were_delegated(self, ep: ExportedProgram) -> None:
        for node in ep.graph.nodes:
            custom = node.meta.get(CUSTOM_META_KEY)
            if (
                node.op == "call_function"
                and isinstance(custom, dict)
                and custom.get(PRESERVED_META_KEY)
                and "delegation_tag" not in node.meta
            ):
                raise RuntimeError(
                    f"xnnfold kept '{node.name}' ({node.target}) undecomposed so that its "
                    "GEMM's weight could be folded, but the GEMM was not delegated, and no "
                    "portable kernel exists for it. Lower this model with "
                    "XnnpackFoldingPartitioner(fold=False) and report the model."
                )

    def _report_rejections(self) -> None:
        for (gemm, _), rejection in self.rejections.items():
            if "delegation_tag" in gemm.meta:
                continue
            if rejection.computed_from_constants or rejection.site is not None:
                where = f" (computed by {rejection.site})" if rejection.site else ""
                logger.warning(
                    "xnnfold: GEMM '%s' stays on the portable kernels: its %s%s is not "
                    "folded because %s",
                    gemm.name,
                    rejection.role,
                    where,
                    rejection.reason,
                )
