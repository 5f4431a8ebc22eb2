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
import weakref
from typing import AbstractSet, Any, cast, Optional, Sequence, TypeVar, Union

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
from torch.fx import Graph, Node
from torch.fx.passes.utils.source_matcher_utils import get_source_partitions

from xnnfold._meta import FOLD_META_KEY, FOLD_OPTIONS_META_KEY, FOLD_SCALES_META_KEY
from xnnfold.passes._codes import BEYOND_BUDGET, Problem, WRITTEN_BUFFER, WRITTEN_ELSEWHERE
from xnnfold.passes._options import FoldOptions
from xnnfold.passes.analysis import (
    addmm_problem,
    addmm_scales,
    deconvolution_problem,
    find_weight_computation,
    is_constant_source,
    is_float32,
    is_preserved,
    note_growth,
    permuted_weight_problem,
    Rejection,
    shared_kernel_problem,
    WeightComputation,
)
from xnnfold.passes.partition._context import (
    DEFAULT_CONTEXT,
    FoldContext,
    report_accepted,
    report_argument_problem,
    report_rejection,
    report_shared_fold,
)

__all__ = [
    "check_replacements",
    "FoldingAddmmConfig",
    "FoldingConvolutionConfig",
    "FoldingGEMMMixin",
    "FoldingLinearConfig",
    "FoldingMMConfig",
    "FOLDING_GEMM_CONFIGS",
    "STOCK_SCRATCH_ATTRIBUTES",
    "written_elsewhere",
]

logger = logging.getLogger(__name__)
why = WhyNoPartition(logger=logger)

_Config = TypeVar("_Config", bound="FoldingGEMMMixin")

# executorch's AddmmConfig.get_deps keeps the source partitions it just computed on the
# config (a scratch value it rewrites on every call and nothing of ours reads): the one
# attribute a config's own stock code writes after construction.
STOCK_SCRATCH_ATTRIBUTES = frozenset({"src_partitions"})

# GEMM arguments (by graph) already warned about as stored twice: `computation` runs many
# times per lowering, over configs rebuilt for every round. Held weakly: nothing outlives
# its graph.
_WARNED_STORED_TWICE: weakref.WeakKeyDictionary[Graph, set[tuple[str, int]]] = (
    weakref.WeakKeyDictionary()
)


def written_elsewhere(
    result: Union[WeightComputation, Rejection, None],
    ep: ExportedProgram,
    written_buffers: Optional[AbstractSet[str]],
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
                WRITTEN_ELSEWHERE,
                keep_stock=True,
            )
    return None


class FoldingGEMMMixin:
    """Accepts a GEMM whose fp32 weight or bias is a foldable computation of constants.

    Built with one immutable `FoldContext` (``context``) and never written afterwards
    (`build` seals it: setting an attribute then raises). What it finds is reported to
    the enclosing `collected` call (`_context`), not kept on the config.
    """

    context: FoldContext = DEFAULT_CONTEXT
    # Whether XNNPACK takes this GEMM with an fp32 weight computed at run time (the
    # fully-connected ops do, as with force_non_static_weights_for_f32_linear).
    dynamic_weights: bool = False

    def __init__(self, *, context: FoldContext = DEFAULT_CONTEXT, **options: Any) -> None:
        super().__init__(**options)
        self.context = context

    @classmethod
    def build(
        cls: type[_Config],
        context: FoldContext,
        precisions: Optional[list[ConfigPrecisionType]],
        options: dict[str, Any],
    ) -> _Config:
        """A sealed config: built as `XnnpackPartitioner` builds its configs (the
        keywords, then the enabled precisions), with ``context``."""
        config = cls(context=context, **options)
        config.set_enabled_precision_types(precisions)  # type: ignore[attr-defined]
        config.__dict__["_sealed"] = True
        return config

    def __setattr__(self, name: str, value: object) -> None:
        if self.__dict__.get("_sealed") and name not in STOCK_SCRATCH_ATTRIBUTES:
            raise AttributeError(
                f"xnnfold: {type(self).__name__} is immutable once built; '{name}' cannot "
                "be set on it. Build a new config with a new FoldContext instead."
            )
        super().__setattr__(name, value)

    @property
    def fold(self) -> bool:
        return self.context.fold

    @property
    def options(self) -> FoldOptions:
        return self.context.options

    # Provided by GEMMConfig.
    weight_idx: int
    bias_idx: Optional[int]
    # Provided by XNNPartitionerConfig (set in its __init__; annotation only).
    force_non_static_weights_for_f32_linear: bool
    target_name: str

    def arg_positions(self) -> tuple[int, ...]:
        return (
            (self.weight_idx,)
            if self.bias_idx is None
            else (
                self.weight_idx,
                self.bias_idx,
            )
        )

    def computation(
        self, node: Node, arg_index: int, ep: ExportedProgram
    ) -> Union[WeightComputation, Rejection, None]:
        """The shared predicate, for this GEMM's argument layout."""
        context = self.context
        result = self._find(node, arg_index, ep, stored_elsewhere=context.stored_elsewhere)
        if isinstance(result, Rejection) and (
            context.stored_elsewhere or context.non_folding - {node.name}
        ):
            alone = self._find(node, arg_index, ep, sizes=False)
            written = written_elsewhere(alone, ep, context.written_buffers)
            if written is not None:
                # The reason that decides: its sources may be recorded as stored only
                # because this GEMM, reading a written buffer, will not fold them.
                return written
            if isinstance(alone, WeightComputation) and node.name in context.fold_anyway:
                result = alone
            elif isinstance(alone, Rejection) and alone.code is BEYOND_BUDGET:
                # Declined by the budget even with nothing else keeping its sources: that
                # is the reason (its sources look kept, or the GEMMs sharing them
                # non-folding, only because the budget declined them).
                result = alone
            elif isinstance(alone, WeightComputation) and self._keeps_ops(node, ep):
                # Declined only to keep the program small: a method lowered after this
                # one's decompositions stores a source too, or a GEMM that takes its
                # weight at run time (or stays on portable) reads it. This GEMM's
                # computations kept ops (`_weight_norm`, `stack`) that have no portable
                # kernel, so it must be delegated with them folded: correct, and the
                # shared sources are stored beside the folded value (an intermediate
                # another reader needs becomes an output of the delegate, computed there).
                said = _WARNED_STORED_TWICE.setdefault(ep.graph, set())
                key = (node.name, arg_index)
                if key not in said:
                    said.add(key)
                    logger.warning(
                        "xnnfold: the %s of GEMM '%s' is folded although its sources are "
                        "also kept for another reader (another method, or a GEMM that does "
                        "not fold them), so the program stores both",
                        alone.role,
                        node.name,
                    )
                result = alone
        return written_elsewhere(result, ep, context.written_buffers) or result

    def _find(
        self,
        node: Node,
        arg_index: int,
        ep: ExportedProgram,
        *,
        stored_elsewhere: frozenset[str] = frozenset(),
        sizes: bool = True,
    ) -> Union[WeightComputation, Rejection, None]:
        """The shared predicate with this config's layout, options and non-folding GEMMs
        (the GEMM itself excepted: its own computation is the one asked about). Without
        ``sizes``, only the rules that make a fold wrong apply, not those that keep the
        program small (sources kept by other methods or by non-folding GEMMs)."""
        return find_weight_computation(
            node,
            arg_index,
            ep,
            arg_positions=self.arg_positions(),
            options=self.options,
            stored_elsewhere=stored_elsewhere,
            non_folding=self.context.non_folding - {node.name} if sizes else frozenset(),
        )

    def declined_for_size(
        self, node: Node, arg_index: int, ep: ExportedProgram
    ) -> Optional[WeightComputation]:
        """For an argument `computation` declined, the computation when only the rules
        that keep the program small decline it (a fold would be correct), else None."""
        if not self.fold:
            return None
        alone = self._find(node, arg_index, ep, sizes=False)
        if not isinstance(alone, WeightComputation):
            return None
        return None if written_elsewhere(alone, ep, self.context.written_buffers) else alone

    def _keeps_ops(self, node: Node, ep: ExportedProgram) -> bool:
        """True when a computation of one of this GEMM's arguments holds an op the
        partitioner kept undecomposed (decided before other methods were seen)."""
        for index in self.arg_positions():
            result = self._find(node, index, ep, sizes=False)
            if isinstance(result, WeightComputation) and any(is_preserved(n) for n in result.nodes):
                return True
        return False

    def _computed_deps(
        self, node: Node, arg_index: Optional[int], ep: ExportedProgram
    ) -> Optional[tuple[bool, list[Node]]]:
        """Deps of a computed argument, or None to keep the stock decision."""
        if not self.fold or arg_index is None:
            return None
        result = self.computation(node, arg_index, ep)
        if result is None:
            return None
        note_growth(node, arg_index, result)
        if isinstance(result, WeightComputation) and result.shared:
            # The partitioner checks these GEMMs' common partition for cycles.
            report_shared_fold(node)
        if isinstance(result, Rejection):
            why(node, result.reason)
            report_rejection(node, arg_index, result)
            if (
                self.dynamic_weights
                and not self.scales(node)
                and result.computed_from_constants
                and not result.keep_stock
                and arg_index == self.weight_idx
                and is_float32(node.args[arg_index])
            ):
                # Not folded (that would store a second copy, or more), but XNNPACK's
                # fully-connected op takes an fp32 weight computed at run time: the GEMM
                # is delegated and its weight computation stays in the program. (Only
                # fp32: a bf16 one is accepted here and then fails to load.)
                return (True, [])
            return (False, [])
        report_accepted(node, arg_index)
        return (True, [*result.nodes, *result.sources])

    def _get_weight_deps(
        self, node: Node, ep: ExportedProgram, precision: ConfigPrecisionType
    ) -> tuple[bool, list[Node]]:
        valid, deps = super()._get_weight_deps(node, ep, precision)  # type: ignore[misc]
        if valid or precision != ConfigPrecisionType.FP32:
            return valid, deps
        computed = self._computed_deps(node, self.weight_idx, ep)
        return (valid, deps) if computed is None else computed

    def _get_bias_deps(
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

    def scales(self, node: Node) -> dict[int, float]:
        """{argument index: factor} the fold must multiply into an argument (addmm's
        beta and alpha); empty for every other GEMM."""
        return {}

    def _argument_problem(self, node: Node, ep: ExportedProgram) -> Optional[Problem]:
        """Why XNNPACK cannot compute this GEMM's arguments, whatever its weight."""
        return None

    def constant_source(self, node: Node, ep: ExportedProgram) -> bool:
        """True when placeholder ``node`` holds a value fixed at export: a parameter, a
        constant, or a buffer no method writes."""
        return is_constant_source(ep, node, self.context.written_buffers)

    def _written_static_problem(self, node: Node, ep: ExportedProgram) -> Optional[Problem]:
        """A weight or bias XNNPACK would store is a buffer the program writes: the
        delegate would keep its export-time value while the program updates it (the
        stock configs take any buffer as static)."""
        # With force_non_static_weights_for_f32_linear a fully-connected GEMM takes both
        # at run time; a convolution stores both whatever the flag.
        run_time = self.force_non_static_weights_for_f32_linear and self.dynamic_weights
        positions = [] if run_time else [self.bias_idx, self.weight_idx]
        for index in positions:
            arg = node.args[index] if index is not None and index < len(node.args) else None
            if (
                isinstance(arg, Node)
                and arg.name in ep.graph_signature.inputs_to_buffers
                and not self.constant_source(arg, ep)
            ):
                role = "weight" if index == self.weight_idx else "bias"
                return Problem(
                    WRITTEN_BUFFER,
                    f"its {role} is buffer '{arg.name}', which the program writes; "
                    "XNNPACK would store its value at export time",
                )
        return None

    def check_constraints(self, node: Node, ep: ExportedProgram) -> bool:
        problem = self._written_static_problem(node, ep) or self._argument_problem(node, ep)
        if problem is not None:
            why(node, problem)
            report_argument_problem(node, problem)
            return False
        return super().check_constraints(node, ep)  # type: ignore[misc]

    def folded_args(
        self, node: Node, ep: ExportedProgram, partition: list[Node]
    ) -> dict[int, Optional[str]]:
        """{argument index: site} of this GEMM's arguments whose computation is in
        ``partition`` and will be folded there (with force_non_static_weights_for_f32_linear
        a foldable weight stays outside, computed at run time)."""
        if not self.fold:
            return {}
        members = set(partition)
        folded: dict[int, Optional[str]] = {}
        for index in self.arg_positions():
            result = self.computation(node, index, ep)
            if isinstance(result, WeightComputation) and result.root in members:
                folded[index] = result.site
        return folded

    def get_node_and_deps(self, node: Node, ep: ExportedProgram) -> list[Node]:
        partition = super().get_node_and_deps(node, ep)  # type: ignore[misc]
        # Marked only here, on the accept path: check_constraints also runs for GEMMs
        # that end up declined, and a mark must mean "this GEMM's partition folds".
        # Quantized GEMMs too: their weight is a dequantize (never foldable), so only a
        # computed fp32 bias can be marked there.
        folded = self.folded_args(node, ep, partition)
        scales = self.scales(node)
        if folded:
            node.meta[FOLD_META_KEY] = folded
        if scales:
            node.meta[FOLD_SCALES_META_KEY] = scales
        if folded or scales:
            node.meta[FOLD_OPTIONS_META_KEY] = self.options
        return partition


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

    dynamic_weights = True


class _SkipSourcePartitionMixin(FoldingGEMMMixin):
    def _permuted_weight_problem(self, node: Node, ep: ExportedProgram) -> Optional[Problem]:
        # With force_non_static_weights_for_f32_linear a foldable weight is not folded.
        folded = (
            self.fold
            and not self.force_non_static_weights_for_f32_linear
            and isinstance(self.computation(node, self.weight_idx, ep), WeightComputation)
        )
        return permuted_weight_problem(node, self.weight_idx, folded=folded)

    # Provided by AddmmConfig: the source modules whose decomposition it maps back.
    linear_modules: list[Any]

    def _foldable(self, node: Node, ep: ExportedProgram) -> list[WeightComputation]:
        return [
            result
            for index in self.arg_positions()
            if isinstance(result := self.computation(node, index, ep), WeightComputation)
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
    and weight constants (`FOLD_SCALES_META_KEY`), which needs both to be constants or
    foldable computations of constants; anything else stays on portable, with a reason.
    """

    dynamic_weights = True

    def scales(self, node: Node) -> dict[int, float]:
        return addmm_scales(node)

    def _argument_problem(self, node: Node, ep: ExportedProgram) -> Optional[Problem]:
        def constant_or_foldable(index: int) -> bool:
            arg = node.args[index]
            if isinstance(arg, Node) and arg.op == "placeholder":
                return self.constant_source(arg, ep)
            return isinstance(self.computation(node, index, ep), WeightComputation)

        return addmm_problem(
            node,
            fold=self.fold,
            force_non_static_weights=self.force_non_static_weights_for_f32_linear,
            constant_or_foldable=constant_or_foldable,
        ) or self._permuted_weight_problem(node, ep)


class FoldingMMConfig(_SkipSourcePartitionMixin, MMConfig):
    """`MMConfig` that folds a computed right-hand matrix (`x @ W.t()`)."""

    dynamic_weights = True

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
