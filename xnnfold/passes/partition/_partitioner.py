"""`XnnpackFoldingPartitioner`: the stock XNNPACK partitioner plus computed GEMM weights.

A drop-in replacement for `XnnpackPartitioner`. Its GEMM configs also accept a weight or
bias computed from parameters, unmutated buffers or constants (see `_configs.py`), and it
keeps the ATen ops of those computations undecomposed (`_weight_norm`, `mv`, `vdot`, ...)
so the fold evaluates exactly the kernels eager PyTorch runs: the folded weight is
bit-for-bit the weight a hand-folded model holds. On a graph without computed weights it
partitions exactly as the stock partitioner does.

This module is executorch's face of the partitioner: the class and the four methods
executorch calls (`ops_to_not_decompose`, `partition`, and the two it inherits the use of,
`get_matched_nodes_from_configs` and `generate_partitions`). What each answer is made of
lives beside it: the ATen-stage answers in `_aten_stage`, the tensors asked about in
`_asked`, the matching in `_matching`, the partitions in `_grouping`, what is written
after partitioning in `_outcome`.
"""

from __future__ import annotations

import functools
import logging
import threading
import weakref
from typing import Any, Callable, Mapping, Optional, Union

from executorch.backends.xnnpack.partition.config import ALL_PARTITIONER_CONFIGS
from executorch.backends.xnnpack.partition.config.xnnpack_config import (
    ConfigPrecisionType,
    XNNPartitionerConfig,
)
from executorch.backends.xnnpack.partition.xnnpack_partitioner import (
    XnnpackPartitioner,
)
from executorch.exir.backend.canonical_partitioners.config_partitioner import (
    PartitionerConfig,
)
from executorch.exir.backend.partitioner import PartitionResult
from torch.export import ExportedProgram
from torch.fx import Node
from torch.fx.passes.infra.partitioner import Partition

from xnnfold._releases import installed_version as _installed
from xnnfold._upstream import (
    check_releases,
    OpOverload,
    supports_bf16,
    warn_if_deprecated_to_backend,
)
from xnnfold.passes._ops import DEFAULT_MAX_FOLD_NODES
from xnnfold.passes._options import DEFAULT_GROWTH_BUDGET, FoldOptions, GrowthBudget
from xnnfold.passes.analysis import (
    find_tied_tables,
    FIRST_ROUND,
    new_analysis_cache,
    NO_FACTS,
    ProgramFacts,
    Rejection,
    RoundDecisions,
    table_uses,
    TiedTables,
)
from xnnfold.passes.fold._hook import install_preprocess_hook
from xnnfold.passes.fold._tanh_gelu import delegated_tanh_gelus
from xnnfold.passes.partition._argument_checks import argument_declines, checked_configs
from xnnfold.passes.partition._asked import AskedConstants
from xnnfold.passes.partition._aten_plan import aten_plan, AtenPlan, PlanCache
from xnnfold.passes.partition._aten_stage import note_method, ops_to_keep
from xnnfold.passes.partition._configs import check_replacements, folding_configs
from xnnfold.passes.partition._decompositions import kept_for_folds
from xnnfold.passes.partition._facts import CrossMethodFacts, facts_for_new_partitioner
from xnnfold.passes.partition._findings import Findings, NO_FINDINGS
from xnnfold.passes.partition._folding_config import FoldingGEMMMixin
from xnnfold.passes.partition._grouping import partitions_of, tag_partitions
from xnnfold.passes.partition._matching import matched_to_fixed_point, Matching
from xnnfold.passes.partition._outcome import (
    check_preserved_were_delegated,
    PARTITIONER_LOGGER,
    record_reasons,
    write_fold_marks,
)
from xnnfold.passes.partition._tied_tagging import tag_tied_tables
from xnnfold.passes.report._reasons import collect_why_reasons

__all__ = ["XnnpackFoldingPartitioner"]

# What executorch's `ExportedProgram.dialect` says of the programs it asks about before
# decomposition (after lowering it asks again, about "EDGE" programs).
_ATEN_DIALECT = "ATEN"

logger = logging.getLogger(PARTITIONER_LOGGER)

# The config keywords of the stock partitioner that this one reads too.
FORCE_NON_STATIC_WEIGHTS_OPTION = "force_non_static_weights_for_f32_linear"
ENABLE_BF16_OPTION = "enable_bf16"


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
        fold: False turns folding off (the stock partitioner's behaviour, except that
            an addmm XNNPACK would compute wrongly, with beta or alpha other than 1 or
            a bias that is not per output channel, stays on portable, and that a
            convolution keeps a static bias under
            ``force_non_static_weights_for_f32_linear``).
        max_fold_nodes: the largest weight computation to fold (`FoldOptions`; the
            fold pass re-checks each fold with the same options).
        keep_decomposition_filter: always give executorch a per-node filter of the ops
            to keep undecomposed, as the stock partitioner does. By default the filter
            is left out when it provably changes nothing (every instance it could see
            is accepted), which saves executorch two decomposition passes; the program
            is byte-identical either way. An escape hatch, slower.
        growth_budget: the bytes a convolution's fold may add to the program
            (`GrowthBudget`; `NO_GROWTH` declines every fold that grows it).
        facts: the `CrossMethodFacts` the partitioners of a lowering share (what each
            method does with the constants the methods share). By default the object
            the partitioners built just before this one, in this thread, share (the
            entries of a ``partitioner={...}`` dict), or a new one.
        tie_tables: store a tied table once (docs/tied-tables.md): a constant a
            delegated linear takes as its weight and an op outside the delegate also
            reads (an embedding shared with the lm_head, in one method or across
            methods) is tagged for executorch's default external data file, for the
            program's copy and the delegate's alike, where it is stored once. The
            ``.pte`` then loads only with that file: write both with `xnnfold.save`.
            False (the default) keeps both copies in the ``.pte``, as the stock
            partitioner does, and `xnnfold.explain` names the bytes tying would save.
        **config_options: handed to every config class, as `XnnpackPartitioner` hands
            its keywords: ``force_non_static_weights_for_f32_linear``, ``enable_bf16``
            (executorch 1.5.0 and later), and the options of config classes given in
            ``configs``. Only the keywords given are handed on.

    The arguments and keywords of `XnnpackPartitioner` are accepted in the same order and
    with the same meaning; xnnfold's own options are keyword-only.

    One instance serves one thread: it remembers, between executorch's question about
    which ops to keep and its partition call, the constant tensors it was asked about.
    Used from a second thread it raises; build one per thread.

    Example::

        model = prepare_for_xnnpack(model.eval())
        ep = torch.export.export(model, example_inputs)
        et = to_edge_transform_and_lower(
            ep, partitioner=[XnnpackFoldingPartitioner()]
        ).to_executorch()
    """

    def __init__(
        self,
        configs: Optional[list[type[XNNPartitionerConfig]]] = None,
        config_precisions: Optional[Union[ConfigPrecisionType, list[ConfigPrecisionType]]] = None,
        per_op_mode: bool = False,
        verbose: bool = False,
        *,
        fold: bool = True,
        max_fold_nodes: int = DEFAULT_MAX_FOLD_NODES,
        keep_decomposition_filter: bool = False,
        growth_budget: GrowthBudget = DEFAULT_GROWTH_BUDGET,
        facts: Optional[CrossMethodFacts] = None,
        tie_tables: bool = False,
        **config_options: Any,
    ) -> None:
        check_releases()
        check_replacements()
        if config_options.get(ENABLE_BF16_OPTION) and not supports_bf16():
            # The stock partitioner takes the keyword and its configs ignore it; so does
            # this one (bf16 GEMMs stay on portable, computing what eager does).
            logger.warning(
                "xnnfold: XnnpackFoldingPartitioner(enable_bf16=True) has no effect: the "
                "installed executorch %s has no bf16 delegation (it arrived in 1.5.0), so "
                "bf16 GEMMs stay on the portable kernels; upgrade executorch to delegate them",
                _installed("executorch") or "(unknown version)",
            )
        try:
            options = FoldOptions(max_fold_nodes=max_fold_nodes, growth_budget=growth_budget)
        except (TypeError, ValueError) as error:
            raise type(error)(f"XnnpackFoldingPartitioner: {error}") from None
        super().__init__(
            checked_configs(folding_configs(configs or ALL_PARTITIONER_CONFIGS)),
            config_precisions,
            per_op_mode,
            verbose,
            **config_options,
        )
        self.fold = fold
        self.options = options
        # Read as the stock configs read it (XNNPartitionerConfig.__init__).
        self._force_non_static_weights = bool(
            config_options.get(FORCE_NON_STATIC_WEIGHTS_OPTION, False)
        )
        self.keep_decomposition_filter = keep_decomposition_filter
        self.tie_tables = tie_tables
        # What every config is built with, as `XnnpackPartitioner` builds them.
        self._precisions = (
            [config_precisions]
            if isinstance(config_precisions, ConfigPrecisionType)
            else config_precisions
        )
        self._config_options = dict(config_options)
        self._facts = facts if facts is not None else facts_for_new_partitioner()
        # The thread this instance serves (set on first use): its caches and the tensors
        # below are one lowering's at a time.
        self._thread: Optional[int] = None
        # The current stage's ATen plans and constant maps by program, handed to every
        # query it asks and to the configs it builds (`_start_stage`).
        self._plans: PlanCache = weakref.WeakKeyDictionary()
        self._analysis = new_analysis_cache()
        # The tensors behind each constant FQN this partitioner was asked about: the keys
        # by which the partition reads the cross-method facts.
        self._asked = AskedConstants()
        # The last partition's findings (`rejections`), for inspection only.
        self._findings = NO_FINDINGS
        # The configs every method executorch inherits reads: built with this
        # partitioner's options and no program's facts. Each lowering step builds its own.
        self.target_partitioner_configs = self._configs(NO_FACTS, FIRST_ROUND)

    @property
    def rejections(self) -> Mapping[tuple[Node, int], Rejection]:
        """The computed arguments the last `partition` declined, by (GEMM, index)."""
        return self._findings.rejections

    @property
    def max_fold_nodes(self) -> int:
        return self.options.max_fold_nodes

    @property
    def facts(self) -> CrossMethodFacts:
        """The `CrossMethodFacts` this partitioner shares with the other partitioners of
        each lowering it serves."""
        return self._facts

    def _start_stage(self) -> None:
        """Fresh caches for each executorch call (the program may have been edited)."""
        self._serve_this_thread()
        self._plans = weakref.WeakKeyDictionary()
        self._analysis = new_analysis_cache()

    def _serve_this_thread(self) -> None:
        thread = threading.get_ident()
        if self._thread is None:
            self._thread = thread
        elif self._thread != thread:
            raise RuntimeError(
                "xnnfold: this XnnpackFoldingPartitioner was first used in another thread; "
                "one instance keeps one lowering's state between executorch's calls, so "
                "build one partitioner per thread"
            )

    def _configs(
        self, facts: ProgramFacts, decisions: RoundDecisions, kept: frozenset[str] = frozenset()
    ) -> dict[str, PartitionerConfig]:
        """This partitioner's configs, each folding one built anew with ``facts``,
        ``decisions`` and the nodes ``kept`` undecomposed for a fold."""
        return {
            name: type(config).build(
                self._precisions,
                self._config_options,
                fold=self.fold,
                fold_options=self.options,
                facts=facts,
                decisions=decisions,
                kept=kept,
                cache=self._analysis,
            )
            if isinstance(config, FoldingGEMMMixin)
            else config
            for name, config in self.target_partitioner_configs.items()
        }

    def get_matched_nodes_from_configs(self, ep: ExportedProgram) -> list[list[Node]]:
        """executorch's grouping of every config's partition, repeated until every fold
        it accepts still holds (`matched_to_fixed_point`). Writes nothing."""
        self._start_stage()
        facts = self._asked.program_facts(self._facts)
        return self._matched(ep, facts, kept_for_folds(ep)).groups

    def _matched(self, ep: ExportedProgram, facts: ProgramFacts, kept: frozenset[str]) -> Matching:
        return matched_to_fixed_point(
            ep, lambda decisions: self._configs(facts, decisions, kept), cache=self._analysis
        )

    def generate_partitions(self, ep: ExportedProgram) -> list[Partition]:
        """The partitions `partition` tags (`partitions_of` the final matching). Writes
        nothing: `partition` writes the outcome."""
        self._start_stage()
        partitions, _ = self._partitions(
            ep, self._asked.program_facts(self._facts), kept_for_folds(ep)
        )
        return partitions

    def _partitions(
        self, ep: ExportedProgram, facts: ProgramFacts, kept: frozenset[str]
    ) -> tuple[list[Partition], Findings]:
        matching = self._matched(ep, facts, kept)
        partitions = partitions_of(
            ep, matching.groups, matching.findings, per_op_mode=self.per_op_mode
        )
        return partitions, matching.findings

    def ops_to_not_decompose(
        self, ep: ExportedProgram
    ) -> tuple[list[OpOverload], Optional[Callable[[Node], bool]]]:
        """The stock ops and filter, plus the ops of foldable weight computations
        (`ops_to_keep`).

        Asked about an ATen program (before decomposition), it first adds what that
        method does with its constants to the lowering's `CrossMethodFacts`
        (`note_method`).
        """
        self._start_stage()
        facts = self._facts
        if ep.dialect == _ATEN_DIALECT:
            tensors = self._asked.remember(ep)
            if self.fold:
                note_method(
                    ep, tensors, facts, asked=self._asked, plan=self._plan, cache=self._analysis
                )
            if self.tie_tables:
                facts.note_tables(tensors, table_uses(ep), program=ep)
        program_facts = self._asked.program_facts(facts)
        return ops_to_keep(
            ep,
            program_facts,
            plan=self._plan if self.fold else None,
            configs_for=functools.partial(self._configs, program_facts, FIRST_ROUND),
            keep_filter=self.keep_decomposition_filter,
        )

    def _plan(self, ep: ExportedProgram, facts: ProgramFacts) -> AtenPlan:
        """`aten_plan` with this partitioner's options and caches, and ``facts``."""
        return aten_plan(
            ep,
            self.options,
            force_non_static_weights=self._force_non_static_weights,
            configs=frozenset(
                name
                for name, config in self.target_partitioner_configs.items()
                if isinstance(config, FoldingGEMMMixin)
            ),
            facts=facts,
            cache=self._analysis,
            plans=self._plans,
        )

    def partition(self, exported_program: ExportedProgram) -> PartitionResult:
        """The stock partition (the tagging `XnnpackPartitioner.partition` does) of this
        partitioner's final matching, with the fold marks and reasons written from what
        it found (`_outcome`)."""
        self._start_stage()
        warn_if_deprecated_to_backend(self)
        facts = self._facts
        # Every method's question has been asked (`_facts`): this lowering's facts are in.
        facts.start_partitioning()
        program_facts = self._asked.program_facts(facts)
        kept = kept_for_folds(exported_program)
        with collect_why_reasons(exported_program.graph_module) as stock_reasons:
            partitions, findings = self._partitions(exported_program, program_facts, kept)
        result = tag_partitions(exported_program, partitions, self.delegation_spec)
        delegated = frozenset(node.name for partition in partitions for node in partition.nodes)
        self._findings = findings
        tanh_gelus = delegated_tanh_gelus(exported_program, delegated)
        write_fold_marks(exported_program, findings, self.options, delegated, tanh_gelus=tanh_gelus)
        if (self.fold and (findings.folds or findings.scales)) or tanh_gelus:
            install_preprocess_hook()
        if self.fold:
            check_preserved_were_delegated(
                exported_program, kept, delegated, program_facts.written_buffers, self.options
            )
        tables = (
            find_tied_tables(
                exported_program, across_methods=self._asked.tied_across_methods(facts)
            )
            if self.tie_tables
            else TiedTables()
        )
        record_reasons(
            exported_program,
            delegated=delegated,
            stock_reasons=stock_reasons,
            findings=findings,
            untied=tables.untied,
            op_problems=argument_declines(
                exported_program, self.target_partitioner_configs, delegated
            ),
        )
        if self.tie_tables:
            tag_tied_tables(exported_program, tables)
        # executorch rewrites the program next: this stage's maps end here.
        self._start_stage()
        return result
