"""The four folding GEMM configs: executorch's XNNPACK GEMM configs plus computed arguments.

Each is the stock config (executorch/backends/xnnpack/partition/config/gemm_configs.py)
with `FoldingGEMMMixin` (`_folding_config`), which takes a computed weight or bias the
decision ladder folds, and with what XNNPACK computes wrongly or not at all left on
portable: a deconvolution it cannot run, addmm's scales and per-row biases, an mm or
addmm weight that is a permute XNNPACK would read as a transpose, and, under
``force_non_static_weights_for_f32_linear``, a convolution bias it cannot take at run
time. `FOLDING_GEMM_CONFIGS` maps each stock config to its folding replacement.
"""

from __future__ import annotations

from typing import Any, cast, Optional, Sequence

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
from torch.export import ExportedProgram
from torch.fx import Node
from torch.fx.passes.utils.source_matcher_utils import get_source_partitions

from xnnfold.passes._reason_codes import Problem
from xnnfold.passes.analysis import (
    addmm_problem,
    addmm_scales,
    deconvolution_problem,
    permuted_weight_problem,
    shared_kernel_problem,
    WeightComputation,
)
from xnnfold.passes.partition._folding_config import FoldingGEMMMixin

__all__ = [
    "folding_configs",
    "check_replacements",
    "FoldingAddmmConfig",
    "FoldingConvolutionConfig",
    "FoldingLinearConfig",
    "FoldingMMConfig",
    "FOLDING_GEMM_CONFIGS",
]


class FoldingConvolutionConfig(FoldingGEMMMixin, ConvolutionConfig):
    """`ConvolutionConfig` (1D/2D, depthwise, transposed) that folds computed weights,
    and leaves on portable a deconvolution XNNPACK cannot run (`deconvolution_problem`).

    Its bias is a static argument whatever ``force_non_static_weights_for_f32_linear``
    says. executorch's `GEMMConfig._get_bias_deps` applies that linear option to every
    GEMM, so the stock config hands a convolution its bias at run time, and XNNPACK's
    convolution, which takes only a static bias, fails to load
    (``xnn_status_invalid_parameter``): a program that cannot run.
    """

    def _get_bias_deps(
        self, node: Node, ep: ExportedProgram, precision: ConfigPrecisionType
    ) -> tuple[bool, list[Node]]:
        # The stock bias check reads the precision only to apply that option to FP32: asked
        # as for any other precision, it checks for a static bias (and the folding check
        # after it does not read the precision).
        if precision == ConfigPrecisionType.FP32 and self.force_non_static_weights_for_f32_linear:
            precision = ConfigPrecisionType.STATIC_QUANT
        return super()._get_bias_deps(node, ep, precision)

    def _argument_problem(self, node: Node, ep: ExportedProgram) -> Optional[Problem]:
        return shared_kernel_problem(node, self.weight_idx) or deconvolution_problem(
            transposed=bool(node.args[6]),
            stride=cast(Sequence[int], node.args[3]),
            output_padding=cast(Sequence[int], node.args[7]),
        )


class FoldingLinearConfig(FoldingGEMMMixin, LinearConfig):
    """`LinearConfig` that folds computed weights and biases."""


class _SkipSourcePartitionMixin(FoldingGEMMMixin):
    def _permuted_weight_problem(self, node: Node, ep: ExportedProgram) -> Optional[Problem]:
        # With force_non_static_weights_for_f32_linear a foldable weight is not folded.
        folded = (
            self.fold
            and not self.force_non_static_weights_for_f32_linear
            and self.folds(node, self.weight_idx, ep) is not None
        )
        return permuted_weight_problem(node, self.weight_idx, folded=folded)

    # Provided by AddmmConfig: the source modules whose decomposition it maps back.
    linear_modules: list[Any]

    def _foldable(self, node: Node, ep: ExportedProgram) -> list[WeightComputation]:
        return [
            computation
            for index in self.arg_positions()
            if (computation := self.folds(node, index, ep)) is not None
        ]

    def _within_linear(self, node: Node, ep: ExportedProgram) -> bool:
        """True when every foldable computation of this GEMM's arguments lies inside
        the `F.linear` it was decomposed from: the transpose of the linear's own weight.

        The stock config maps such a GEMM back to the linear (its source partition),
        where the weight is a parameter: it takes the linear whole, with the reshapes
        around the GEMM and, under dynamic shapes, the symbolic sizes they read, and
        folds nothing."""
        computations = self._foldable(node, ep)
        if not computations:
            return False
        for partitions in get_source_partitions(ep.graph, self.linear_modules).values():
            for partition in partitions:
                if node in partition.nodes:
                    inside = set(partition.nodes)
                    return all(set(c.nodes) <= inside for c in computations)
        return False

    def _stock_takes(self, node: Node, ep: ExportedProgram) -> bool:
        """True when the stock config takes this GEMM as part of its `F.linear`, with a
        parameter weight: nothing of it is folded."""
        return self._within_linear(node, ep) and super().get_deps(node, ep)[0]  # type: ignore[misc]

    def get_deps(self, node: Node, ep: ExportedProgram) -> tuple[bool, list[Node]]:
        # The stock addmm/mm config maps a decomposed F.linear back to its source
        # partition and checks the linear's weight instead of the GEMM's real argument,
        # which hides a computed `W.t()` behind the transpose. A GEMM with a foldable
        # argument is checked on its own arguments, unless that argument is only the
        # linear's own transpose of a parameter and the stock config takes the linear.
        if not self.fold or not self._foldable(node, ep):
            return super().get_deps(node, ep)  # type: ignore[misc]
        if self._within_linear(node, ep):
            valid, deps = super().get_deps(node, ep)  # type: ignore[misc]
            if valid:
                return valid, deps
        return GEMMConfig.get_deps(self, node, ep)

    def folded_args(
        self, node: Node, ep: ExportedProgram, partition: list[Node]
    ) -> dict[int, Optional[str]]:
        if self.fold and self._stock_takes(node, ep):
            return {}
        return super().folded_args(node, ep, partition)


class FoldingAddmmConfig(_SkipSourcePartitionMixin, AddmmConfig):
    """`AddmmConfig` that folds computed weights and biases, and honours every argument.

    XNNPACK serializes an addmm as a fully-connected op: ``input @ mat2 + bias`` with a
    per-output-channel bias. executorch's stock config delegates any addmm with a static
    weight, so ``beta``/``alpha`` are dropped and a bias of shape (), (M, 1) or (M, N) is
    read as if it were (N,): a wrong result. Here an addmm is accepted only when its bias
    is per output channel, and ``beta``/``alpha`` other than 1 are folded into the bias
    and weight constants (`FoldMark.scales`), which needs both to be constants or
    foldable computations of constants; anything else stays on portable, with a reason.
    """

    def scales(self, node: Node) -> dict[int, float]:
        return addmm_scales(node)

    def _argument_problem(self, node: Node, ep: ExportedProgram) -> Optional[Problem]:
        def constant_or_foldable(index: int) -> bool:
            arg = node.args[index]
            if isinstance(arg, Node) and arg.op == "placeholder":
                return self.constant_source(arg, ep)
            return self.folds(node, index, ep) is not None

        return addmm_problem(
            node,
            fold=self.fold,
            force_non_static_weights=self.force_non_static_weights_for_f32_linear,
            constant_or_foldable=constant_or_foldable,
        ) or self._permuted_weight_problem(node, ep)


class FoldingMMConfig(_SkipSourcePartitionMixin, MMConfig):
    """`MMConfig` that folds a computed right-hand matrix (`x @ W.t()`)."""

    def _argument_problem(self, node: Node, ep: ExportedProgram) -> Optional[Problem]:
        return self._permuted_weight_problem(node, ep)


# Stock config -> its folding replacement (same target_name, so it replaces, never joins).
FOLDING_GEMM_CONFIGS: dict[type[XNNPartitionerConfig], type[XNNPartitionerConfig]] = {
    ConvolutionConfig: FoldingConvolutionConfig,
    LinearConfig: FoldingLinearConfig,
    AddmmConfig: FoldingAddmmConfig,
    MMConfig: FoldingMMConfig,
}


def check_replacements() -> None:
    """Raise unless each folding config keeps its stock config's ``target_name``, the key
    by which executorch's partitioner picks one config per op: with another name the folding
    config would sit beside the stock one instead of replacing it."""
    for stock, folding in FOLDING_GEMM_CONFIGS.items():
        if stock.target_name != folding.target_name:
            raise RuntimeError(
                f"xnnfold: {folding.__name__} must keep {stock.__name__}'s target_name "
                f"{stock.target_name!r} to replace it, but has {folding.target_name!r}; "
                "the installed executorch changed how its GEMM configs are named"
            )


def folding_configs(
    configs: Sequence[type[XNNPartitionerConfig]],
) -> list[type[XNNPartitionerConfig]]:
    """``configs`` with each stock GEMM config replaced by its folding version."""
    return [FOLDING_GEMM_CONFIGS.get(config, config) for config in configs]
