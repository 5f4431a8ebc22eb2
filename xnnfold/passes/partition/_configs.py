"""XNNPACK GEMM partitioner configs that also accept computed weights and biases.

The stock configs (executorch/backends/xnnpack/partition/config/gemm_configs.py) decline a
convolution, linear, addmm or mm whose fp32 weight or bias is not a parameter. These
subclasses change exactly one thing: when the stock check declines such an argument and
the decision ladder (`decide`) folds it, the computation joins the GEMM's partition, and
the config reports the fold (`Findings.folds`), which the partitioner writes onto the GEMM
(`FOLD_META_KEY`) after the final matching round for the fold pass to read at preprocess.
Everything else is the stock config's decision.

A config is built with what the ladder reads (the fold options, the program's
`ProgramFacts`, the round's `RoundDecisions`, the nodes kept undecomposed for a fold) and
never written afterwards. executorch's
matching asks it for booleans and node lists; `FoldingGEMMMixin.match` asks the same and
returns what the config found with the partition (`_findings`).
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from typing import Any, cast, Optional, Sequence, TypeVar

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
from torch.fx.passes.utils.source_matcher_utils import get_source_partitions

from xnnfold.passes._codes import Problem, WRITTEN_BUFFER
from xnnfold.passes._options import FoldOptions
from xnnfold.passes.analysis import (
    addmm_problem,
    addmm_scales,
    decide,
    Decision,
    deconvolution_problem,
    FIRST_ROUND,
    is_constant_source,
    NO_FACTS,
    noted_growth,
    permuted_weight_problem,
    ProgramFacts,
    RoundDecisions,
    shared_kernel_problem,
    Stage,
    Verdict,
    WeightComputation,
)
from xnnfold.passes.partition._findings import Findings, FindingsRecord

__all__ = [
    "check_replacements",
    "ConfigMatch",
    "FoldingAddmmConfig",
    "FoldingConvolutionConfig",
    "FoldingGEMMMixin",
    "FoldingLinearConfig",
    "FoldingMMConfig",
    "FOLDING_GEMM_CONFIGS",
    "STOCK_SCRATCH_ATTRIBUTES",
]

logger = logging.getLogger(__name__)
why = WhyNoPartition(logger=logger)

_Config = TypeVar("_Config", bound="FoldingGEMMMixin")

# executorch's AddmmConfig.get_deps keeps the source partitions it just computed on the
# config (a scratch value it rewrites on every call and nothing of ours reads): the one
# attribute a config's own stock code writes after construction.
STOCK_SCRATCH_ATTRIBUTES = frozenset({"src_partitions"})

# The attribute through which a copy of a config made by `FoldingGEMMMixin.match` reports
# to that call's record (absent on every config a partitioner builds).
_RECORD_ATTRIBUTE = "_match_record"

_DEFAULT_OPTIONS = FoldOptions()


@dataclass(frozen=True)
class ConfigMatch:
    """What a folding config answers for one GEMM: its partition (None when the config
    declines it) and what it found on the way."""

    partition: Optional[list[Node]]
    findings: Findings


class FoldingGEMMMixin:
    """Accepts a GEMM whose fp32 weight or bias is a foldable computation of constants.

    Built once with what the decision ladder reads (``fold``, ``fold_options``,
    ``facts``, ``decisions``, ``kept``) and never written afterwards (`build` seals it: setting an
    attribute then raises). What it finds comes back from `match` as a value.
    """

    fold: bool = True
    options: FoldOptions = _DEFAULT_OPTIONS
    facts: ProgramFacts = NO_FACTS
    decisions: RoundDecisions = FIRST_ROUND
    # Names of the nodes kept undecomposed for a fold (`decide`'s ``kept``).
    kept: frozenset[str] = frozenset()
    # XNNPACK serializes this GEMM as a fully-connected op, which takes its weight and
    # bias at run time under force_non_static_weights_for_f32_linear.
    fully_connected: bool = False

    def __init__(
        self,
        *,
        fold: bool = True,
        fold_options: FoldOptions = _DEFAULT_OPTIONS,
        facts: ProgramFacts = NO_FACTS,
        decisions: RoundDecisions = FIRST_ROUND,
        kept: frozenset[str] = frozenset(),
        **options: Any,
    ) -> None:
        super().__init__(**options)
        self.fold = fold
        self.options = fold_options
        self.facts = facts
        self.decisions = decisions
        self.kept = kept

    @classmethod
    def build(
        cls: type[_Config],
        precisions: Optional[list[ConfigPrecisionType]],
        options: dict[str, Any],
        *,
        fold: bool,
        fold_options: FoldOptions,
        facts: ProgramFacts,
        decisions: RoundDecisions,
        kept: frozenset[str] = frozenset(),
    ) -> _Config:
        """A sealed config: built as `XnnpackPartitioner` builds its configs (the
        keywords, then the enabled precisions), with what the ladder reads."""
        config = cls(
            fold=fold,
            fold_options=fold_options,
            facts=facts,
            decisions=decisions,
            kept=kept,
            **options,
        )
        config.set_enabled_precision_types(precisions)  # type: ignore[attr-defined]
        config.__dict__["_sealed"] = True
        return config

    def __setattr__(self, name: str, value: object) -> None:
        if self.__dict__.get("_sealed") and name not in STOCK_SCRATCH_ATTRIBUTES:
            raise AttributeError(
                f"xnnfold: {type(self).__name__} is immutable once built; '{name}' cannot "
                "be set on it. Build a new config with new facts or decisions instead."
            )
        super().__setattr__(name, value)

    # Provided by GEMMConfig.
    weight_idx: int
    bias_idx: Optional[int]
    # Provided by XNNPartitionerConfig (set in its __init__; annotation only).
    force_non_static_weights_for_f32_linear: bool
    target_name: str

    def match(self, node: Node, ep: ExportedProgram) -> ConfigMatch:
        """executorch's two questions about ``node`` (``check_constraints``, then
        ``get_partition``), with what this config found while answering them."""
        record = FindingsRecord()
        # A copy that reports to this call's record: executorch's template methods,
        # which call back into this config, take no argument to carry it.
        reporting = copy.copy(self)
        reporting.__dict__[_RECORD_ATTRIBUTE] = record
        partition = (
            reporting.get_partition(node, ep)  # type: ignore[attr-defined]
            if reporting.check_constraints(node, ep)
            else None
        )
        return ConfigMatch(partition, record.freeze())

    def _record(self) -> Optional[FindingsRecord]:
        """The record of the `match` call this copy serves; None on a built config
        (executorch's own questions, its decomposition filter: nothing is kept)."""
        record = self.__dict__.get(_RECORD_ATTRIBUTE)
        return record if isinstance(record, FindingsRecord) else None

    def arg_positions(self) -> tuple[int, ...]:
        return (
            (self.weight_idx,)
            if self.bias_idx is None
            else (
                self.weight_idx,
                self.bias_idx,
            )
        )

    def verdict(self, node: Node, arg_index: int, ep: ExportedProgram) -> Optional[Verdict]:
        """The decision ladder's verdict on this GEMM's argument, with this config's
        layout, options, facts, round and kept nodes."""
        return decide(
            node,
            arg_index,
            ep,
            arg_positions=self.arg_positions(),
            options=self.options,
            stage=Stage.EDGE,
            facts=self.facts,
            decisions=self.decisions,
            kept=self.kept,
        )

    def folds(self, node: Node, arg_index: int, ep: ExportedProgram) -> Optional[WeightComputation]:
        """The computation to fold for this argument, when the ladder folds it."""
        verdict = self.verdict(node, arg_index, ep)
        return verdict.computation if verdict is not None else None

    def _computed_deps(
        self, node: Node, arg_index: Optional[int], ep: ExportedProgram
    ) -> Optional[tuple[bool, list[Node]]]:
        """Deps of a computed argument, or None to keep the stock decision."""
        if not self.fold or arg_index is None:
            return None
        verdict = self.verdict(node, arg_index, ep)
        if verdict is None:
            return None
        record = self._record()
        result = verdict.computation or verdict.rejection
        growth = noted_growth(result)
        if record is not None and growth is not None:
            record.grew(node, arg_index, growth)
        if verdict.computation is not None:
            if record is not None:
                record.accepted(node, arg_index)
                if verdict.computation.shared:
                    # The partitioner checks these GEMMs' common partition for cycles.
                    record.shared_folds.add(node.name)
                if verdict.stored_twice:
                    record.stored_twice.add((node.name, arg_index, verdict.computation.role))
            return (True, [*verdict.computation.nodes, *verdict.computation.sources])
        rejection = verdict.rejection
        assert rejection is not None  # a verdict other than a fold carries its rejection
        why(node, rejection.reason)
        if record is not None:
            record.rejected(node, arg_index, rejection, verdict.correct_alone)
        if verdict.decision is Decision.RUN_TIME:
            # Not folded (that would store a second copy, or more), but XNNPACK's
            # fully-connected op takes an fp32 weight computed at run time: the GEMM is
            # delegated and its weight computation stays in the program.
            return (True, [])
        return (False, [])

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
        return is_constant_source(ep, node, self.facts.written_buffers)

    def _written_static_problem(self, node: Node, ep: ExportedProgram) -> Optional[Problem]:
        """A weight or bias XNNPACK would store is a buffer the program writes: the
        delegate would keep its export-time value while the program updates it (the
        stock configs take any buffer as static)."""
        # With force_non_static_weights_for_f32_linear a fully-connected GEMM takes both
        # at run time; a convolution stores both whatever the flag.
        run_time = self.force_non_static_weights_for_f32_linear and self.fully_connected
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
            record = self._record()
            if record is not None:
                record.argument_problems[node.name] = problem
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
            computation = self.folds(node, index, ep)
            if computation is not None and computation.root in members:
                folded[index] = computation.site
        return folded

    def get_node_and_deps(self, node: Node, ep: ExportedProgram) -> list[Node]:
        partition = super().get_node_and_deps(node, ep)  # type: ignore[misc]
        # Reported only here, on the accept path: check_constraints also runs for GEMMs
        # that end up declined, and a fold must mean "this GEMM's partition folds".
        # Quantized GEMMs too: their weight is a dequantize (never foldable), so only a
        # computed fp32 bias can fold there.
        record = self._record()
        if record is not None:
            folded = self.folded_args(node, ep, partition)
            scales = self.scales(node)
            if folded:
                record.folds[node.name] = folded
            if scales:
                record.scales[node.name] = scales
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

    fully_connected = True


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
    and weight constants (`FOLD_SCALES_META_KEY`), which needs both to be constants or
    foldable computations of constants; anything else stays on portable, with a reason.
    """

    fully_connected = True

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

    fully_connected = True

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
