"""XNNPACK GEMM partitioner configs that also accept computed weights and biases.

The stock configs (executorch/backends/xnnpack/partition/config/gemm_configs.py) decline a
convolution, linear, addmm or mm whose fp32 weight or bias is not a parameter. These
subclasses change exactly one thing: when the stock check declines such an argument and
`find_weight_computation` says it is a foldable computation of constants, the computation
joins the GEMM's partition, and the GEMM is marked (`FOLD_META_KEY`) so the fold pass turns
it into a constant at preprocess. Everything else is the stock config's decision.
"""

from __future__ import annotations

import logging
from typing import Optional, Union

from executorch.backends.xnnpack.partition.config.gemm_configs import (
    AddmmConfig,
    ConvolutionConfig,
    GEMMConfig,
    LinearConfig,
    MMConfig,
)
from executorch.backends.xnnpack.partition.config.xnnpack_config import (
    ConfigPrecisionType,
    XNNPartitionerConfig,
)
from executorch.exir.backend.utils import WhyNoPartition
from torch.export import ExportedProgram
from torch.fx import Node

from xnnfold.passes._constants import DEFAULT_MAX_FOLD_NODES, FOLD_META_KEY
from xnnfold.passes._predicates import (
    find_weight_computation,
    Rejection,
    WeightComputation,
)

__all__ = [
    "FoldingAddmmConfig",
    "FoldingConvolutionConfig",
    "FoldingGEMMMixin",
    "FoldingLinearConfig",
    "FoldingMMConfig",
    "FOLDING_GEMM_CONFIGS",
    "written_elsewhere",
]

logger = logging.getLogger(__name__)
why = WhyNoPartition(logger=logger)


def written_elsewhere(
    result: Union[WeightComputation, Rejection, None],
    ep: ExportedProgram,
    written_buffers: Optional[set[str]],
) -> Optional[Rejection]:
    """A rejection when a foldable computation reads a buffer another method writes.

    The predicate sees one method's program, where a buffer that only another method of
    the same program writes (``set_gain`` updating the gain ``forward`` reads, with
    ``share_mutable_buffers=True``) looks like a constant. Folding it would freeze the
    value ``forward`` read at export time, so such a computation stays in the program.
    """
    if not isinstance(result, WeightComputation) or not written_buffers:
        return None
    for source in result.sources:
        fqn = ep.graph_signature.inputs_to_buffers.get(source.name)
        if fqn is not None and fqn in written_buffers:
            return Rejection(
                result.gemm,
                result.arg_index,
                result.role,
                f"buffer '{source.name}' ({fqn}) of the {result.role} computation is "
                "written by another method of the program",
                True,
                result.site,
                keep_stock=True,
            )
    return None


class FoldingGEMMMixin:
    """Accepts a GEMM whose fp32 weight or bias is a foldable computation of constants.

    Set by the partitioner after construction: ``fold`` (off means stock behaviour),
    ``max_fold_nodes`` and ``rejections`` (a dict the partitioner reads to report GEMMs
    whose computed weight was declined).
    """

    fold: bool = True
    max_fold_nodes: int = DEFAULT_MAX_FOLD_NODES
    rejections: Optional[dict[tuple[Node, int], Rejection]] = None
    # Names of GEMMs accepted with intermediates shared with other GEMMs' weights.
    shared_folds: Optional[set[str]] = None
    # Whether XNNPACK takes this GEMM with an fp32 weight computed at run time (the
    # fully-connected ops do, as with force_non_static_weights_for_f32_linear).
    dynamic_weights: bool = False
    # Buffers (by FQN) that some method lowered with this partitioner writes.
    written_buffers: Optional[set[str]] = None

    # Provided by GEMMConfig.
    weight_idx: int
    bias_idx: Optional[int]

    def _arg_positions(self) -> tuple[int, ...]:
        return (self.weight_idx,) if self.bias_idx is None else (
            self.weight_idx,
            self.bias_idx,
        )

    def computation(
        self, node: Node, arg_index: int, ep: ExportedProgram
    ) -> Union[WeightComputation, Rejection, None]:
        """The shared predicate, for this GEMM's argument layout."""
        result = find_weight_computation(
            node,
            arg_index,
            ep,
            arg_positions=self._arg_positions(),
            max_nodes=self.max_fold_nodes,
        )
        return written_elsewhere(result, ep, self.written_buffers) or result

    def _computed_deps(
        self, node: Node, arg_index: Optional[int], ep: ExportedProgram
    ) -> Optional[tuple[bool, list[Node]]]:
        """Deps of a computed argument, or None to keep the stock decision."""
        if not self.fold or arg_index is None:
            return None
        result = self.computation(node, arg_index, ep)
        if result is None:
            return None
        if (
            isinstance(result, WeightComputation)
            and result.shared
            and self.shared_folds is not None
        ):
            # The partitioner checks these GEMMs' common partition for cycles.
            self.shared_folds.add(node.name)
        if isinstance(result, Rejection):
            why(node, result.reason)
            if self.rejections is not None:
                self.rejections[(node, arg_index)] = result
            if (
                self.dynamic_weights
                and result.computed_from_constants
                and not result.keep_stock
                and arg_index == self.weight_idx
            ):
                # Not folded (that would store a second copy, or more), but XNNPACK's
                # fully-connected op takes an fp32 weight computed at run time: the GEMM
                # is delegated and its weight computation stays in the program.
                return (True, [])
            return (False, [])
        if self.rejections is not None:
            self.rejections.pop((node, arg_index), None)
        return (True, [*result.nodes, *result.sources])

    def _get_weight_deps(  # type: ignore[override]
        self, node: Node, ep: ExportedProgram, precision: ConfigPrecisionType
    ) -> tuple[bool, list[Node]]:
        valid, deps = super()._get_weight_deps(node, ep, precision)  # type: ignore[misc]
        if valid or precision != ConfigPrecisionType.FP32:
            return valid, deps
        computed = self._computed_deps(node, self.weight_idx, ep)
        return (valid, deps) if computed is None else computed

    def _get_bias_deps(  # type: ignore[override]
        self, node: Node, ep: ExportedProgram, precision: ConfigPrecisionType
    ) -> tuple[bool, list[Node]]:
        valid, deps = super()._get_bias_deps(node, ep, precision)  # type: ignore[misc]
        # Any precision: XNNPACKQuantizer leaves biases in fp32, so a quantized GEMM's
        # computed bias is an fp32 computation of constants like any other, and the stock
        # config takes the same GEMM with the folded bias as a parameter. A quantized
        # bias reaches the GEMM through a dequantize, which the predicate never folds.
        if valid:
            return valid, deps
        computed = self._computed_deps(node, self.bias_idx, ep)
        return (valid, deps) if computed is None else computed

    def folded_args(self, node: Node, ep: ExportedProgram) -> dict[int, Optional[str]]:
        """{argument index: site} of this GEMM's arguments that will be folded."""
        if not self.fold:
            return {}
        folded: dict[int, Optional[str]] = {}
        for index in self._arg_positions():
            result = self.computation(node, index, ep)
            if isinstance(result, WeightComputation):
                folded[index] = result.site
        return folded

    def get_node_and_deps(  # type: ignore[override]
        self, node: Node, ep: ExportedProgram
    ) -> list[Node]:
        partition = super().get_node_and_deps(node, ep)  # type: ignore[misc]
        # Marked only here, on the accept path: check_constraints also runs for GEMMs
        # that end up declined, and a mark must mean "this GEMM's partition folds".
        # Quantized GEMMs too: their weight is a dequantize (never foldable), so only a
        # computed fp32 bias can be marked there.
        folded = self.folded_args(node, ep)
        if folded:
            node.meta[FOLD_META_KEY] = folded
        return partition


class FoldingConvolutionConfig(FoldingGEMMMixin, ConvolutionConfig):
    """`ConvolutionConfig` (1D/2D, depthwise, transposed) that folds computed weights."""


class FoldingLinearConfig(FoldingGEMMMixin, LinearConfig):
    """`LinearConfig` that folds computed weights and biases."""

    dynamic_weights = True


class _SkipSourcePartitionMixin(FoldingGEMMMixin):
    def get_deps(  # type: ignore[override]
        self, node: Node, ep: ExportedProgram
    ) -> tuple[bool, list[Node]]:
        # The stock addmm/mm config maps a decomposed F.linear back to its source
        # partition and checks the linear's weight instead of the GEMM's real argument,
        # which hides a computed `W.t()` behind the transpose. A GEMM with a foldable
        # argument is checked on its own arguments.
        if self.fold and any(
            isinstance(self.computation(node, i, ep), WeightComputation)
            for i in self._arg_positions()
        ):
            return GEMMConfig.get_deps(self, node, ep)  # type: ignore[arg-type]
        return super().get_deps(node, ep)  # type: ignore[misc]


class FoldingAddmmConfig(_SkipSourcePartitionMixin, AddmmConfig):
    """`AddmmConfig` that folds computed weights and biases."""

    dynamic_weights = True


class FoldingMMConfig(_SkipSourcePartitionMixin, MMConfig):
    """`MMConfig` that folds a computed right-hand matrix (`x @ W.t()`)."""

    dynamic_weights = True


# Stock config -> its folding replacement (same target_name, so it replaces, never joins).
FOLDING_GEMM_CONFIGS: dict[type[XNNPartitionerConfig], type[XNNPartitionerConfig]] = {
    ConvolutionConfig: FoldingConvolutionConfig,
    LinearConfig: FoldingLinearConfig,
    AddmmConfig: FoldingAddmmConfig,
    MMConfig: FoldingMMConfig,
}


def _assert_same_targets() -> None:
    for stock, folding in FOLDING_GEMM_CONFIGS.items():
        if stock.target_name != folding.target_name:  # pragma: no cover - import guard
            raise RuntimeError(
                f"{folding.__name__} must keep {stock.__name__}'s target_name "
                f"{stock.target_name!r} so that it replaces the stock config"
            )


_assert_same_targets()
