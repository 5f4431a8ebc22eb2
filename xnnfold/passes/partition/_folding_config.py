"""The folding-config protocol: an XNNPACK GEMM config that also accepts computed arguments.

The stock configs (executorch/backends/xnnpack/partition/config/gemm_configs.py) decline a
convolution, linear, addmm or mm whose fp32 weight or bias is not a parameter.
`FoldingGEMMMixin` changes exactly one thing in a config it is mixed into: when the stock
check declines such an argument and the decision ladder (`decide`) folds it, the
computation joins the GEMM's partition, and the config reports the fold (`Findings.folds`),
which the partitioner writes onto the GEMM (its `FoldMark`) after the final matching round
for the fold pass to read at preprocess. Everything else is the stock config's decision.
The four folding configs and their XNNPACK quirks are in `_configs`, as executorch keeps
`XNNPartitionerConfig` (xnnpack_config.py) apart from its GEMM configs.

A config is built with what the ladder reads (the fold options, the program's
`ProgramFacts`, the round's `RoundDecisions`, the nodes kept undecomposed for a fold, and
the partitioner's `AnalysisCache`, where the ladder's sweeps of the graph are kept) and
never written afterwards. executorch's matching asks it for booleans and node lists;
`FoldingGEMMMixin.match` asks the same and returns what the config found with the
partition (`_findings`).
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from typing import Any, Optional, TypeVar

from executorch.backends.xnnpack.partition.config.xnnpack_config import ConfigPrecisionType
from executorch.exir.backend.utils import WhyNoPartition
from torch.export import ExportedProgram
from torch.fx import Node

from xnnfold.passes._ops import FULLY_CONNECTED_WEIGHT
from xnnfold.passes._options import FoldOptions
from xnnfold.passes._reason_codes import Problem, WRITTEN_BUFFER
from xnnfold.passes.analysis import (
    AnalysisCache,
    decide,
    Decision,
    FIRST_ROUND,
    is_constant_source,
    NO_FACTS,
    noted_growth,
    ProgramFacts,
    RoundDecisions,
    Stage,
    Verdict,
    WeightComputation,
)
from xnnfold.passes.partition._findings import Findings, FindingsRecord

__all__ = ["ConfigMatch", "FoldingGEMMMixin", "STOCK_SCRATCH_ATTRIBUTES"]

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
    ``facts``, ``decisions``, ``kept``, ``cache``) and never written afterwards (`build` seals it: setting an
    attribute then raises). What it finds comes back from `match` as a value.
    """

    fold: bool = True
    options: FoldOptions = _DEFAULT_OPTIONS
    facts: ProgramFacts = NO_FACTS
    decisions: RoundDecisions = FIRST_ROUND
    # Names of the nodes kept undecomposed for a fold (`decide`'s ``kept``).
    kept: frozenset[str] = frozenset()
    # Where the ladder keeps its sweeps of the graph: the partitioner's (None: each
    # question sweeps for itself, as for a config built by hand).
    cache: Optional[AnalysisCache] = None

    def __init__(
        self,
        *,
        fold: bool = True,
        fold_options: FoldOptions = _DEFAULT_OPTIONS,
        facts: ProgramFacts = NO_FACTS,
        decisions: RoundDecisions = FIRST_ROUND,
        kept: frozenset[str] = frozenset(),
        cache: Optional[AnalysisCache] = None,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        self.fold = fold
        self.options = fold_options
        self.facts = facts
        self.decisions = decisions
        self.kept = kept
        self.cache = cache

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
        cache: Optional[AnalysisCache] = None,
    ) -> _Config:
        """A sealed config: built as `XnnpackPartitioner` builds its configs (the
        keywords, then the enabled precisions), with what the ladder reads."""
        config = cls(
            fold=fold,
            fold_options=fold_options,
            facts=facts,
            decisions=decisions,
            kept=kept,
            cache=cache,
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

    @property
    def fully_connected(self) -> bool:
        """XNNPACK serializes this config's GEMM as a fully-connected op, which takes its
        weight and bias at run time under force_non_static_weights_for_f32_linear."""
        return self.target_name.partition(".")[0] in FULLY_CONNECTED_WEIGHT

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
            cache=self.cache,
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
        return is_constant_source(ep, node, self.facts.written_buffers, cache=self.cache)

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
