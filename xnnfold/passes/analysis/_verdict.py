"""The decision ladder: one function says what becomes of a GEMM's computed argument.

Three stages ask whether a weight or bias folds: the ATen plan before decomposition (which
ops to keep), the GEMM configs while partitioning the edge program, and the fold pass
inside each delegate. They all call `decide`, and nothing else decides: "delegated" and
"folded" cannot disagree. What they know differs, and each difference is an input:

- ``facts`` (`ProgramFacts`): what the program's other methods do with this method's
  constants (buffers they write, constants they store anyway). The fold pass has none.
- ``decisions`` (`RoundDecisions`): the partitioner's fixed point matches the graph in
  rounds; a round knows which GEMMs the previous one left without folding and which it
  must fold anyway. Only the configs have them.
- ``stage`` (`Stage`): what the graph itself holds. On the edge program an op kept
  undecomposed for a fold has no portable kernel, so a computation that holds one is
  folded when only the rules that keep the program small decline it (`Stage.EDGE`); on
  the ATen program nothing is kept yet (`Stage.ATEN`); inside a delegate the
  partitioner has accepted the fold on the whole method, so only the rules that make a
  fold wrong decline it (`Stage.DELEGATE`).
- ``kept``: which nodes those kept ops are, by name. The partitioner knows them (its
  ATen plan chose them, and its decomposition filter marked them for the edge program);
  the ladder reads them from its arguments only.

The verdict is one of three: fold the computation, delegate the GEMM with the argument
computed at run time (XNNPACK's fully-connected op takes an fp32 weight as an input), or
decline, each with the `Rejection` and its code where it is not a fold. A weight is taken
at run time when it is computed from constants and declined for the program's size, or
when it is a per-sample weight (`per_sample_weight`: a parameter transformed with the
inputs, XNF501), which nothing can fold and XNNPACK computes as eager does.
"""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass
from typing import AbstractSet, Callable, Optional, Union

import torch
from torch.export import ExportedProgram
from torch.fx import Node
from torch.fx.experimental.symbolic_shapes import free_symbols

from xnnfold._meta import VAL_META_KEY
from xnnfold.passes._graph_walk import walk
from xnnfold.passes._options import FoldOptions
from xnnfold.passes._reason_codes import BEYOND_BUDGET, RUN_TIME, WRITTEN_ELSEWHERE
from xnnfold.passes.analysis._cache import AnalysisCache, own_cache
from xnnfold.passes.analysis._growth import gemm_op_name, has_run_time_weight_form
from xnnfold.passes.analysis._nodes import is_gemm
from xnnfold.passes.analysis._predicates import find_weight_computation
from xnnfold.passes.analysis._results import Rejection, WeightComputation

__all__ = [
    "Decision",
    "FIRST_ROUND",
    "NO_FACTS",
    "ProgramFacts",
    "RoundDecisions",
    "Stage",
    "Verdict",
    "decide",
    "per_sample_weight",
    "written_elsewhere",
]


class Stage(enum.Enum):
    """Which graph the question is asked on (see the module docstring)."""

    ATEN = "aten"
    EDGE = "edge"
    DELEGATE = "delegate"


class Decision(enum.Enum):
    FOLD = "fold"
    RUN_TIME = "run-time weight"
    DECLINE = "decline"


@dataclass(frozen=True)
class ProgramFacts:
    """What the other methods of the program do with this method's constants, by FQN.

    ``written_buffers``: buffers some method writes (never constants, whatever one method
    sees). ``stored_elsewhere``: constants some method stores whatever folds, so folding
    a computation of them frees none of their bytes."""

    written_buffers: frozenset[str] = frozenset()
    stored_elsewhere: frozenset[str] = frozenset()


NO_FACTS = ProgramFacts()


@dataclass(frozen=True)
class RoundDecisions:
    """A matching round's decisions (`_matching.matched_to_fixed_point`), by GEMM name.

    ``non_folding``: GEMMs the previous round took without folding a computed-constant
    argument, or declined: they keep what they read. ``fold_anyway``: GEMMs declined only
    to keep the program small whose sources a delegate would copy anyway."""

    non_folding: frozenset[str] = frozenset()
    fold_anyway: frozenset[str] = frozenset()


FIRST_ROUND = RoundDecisions()


@dataclass(frozen=True)
class Verdict:
    """What becomes of one GEMM argument.

    Attributes:
        decision: fold, run-time weight, or decline.
        computation: what to fold (`Decision.FOLD`).
        rejection: why it is not folded (the other two), with its code.
        correct_alone: for an argument declined only by the rules that keep the program
            small, the computation, which would be correct to fold.
        stored_twice: folded although its sources stay in the program for another
            reader (the computation holds ops kept undecomposed, which need a delegate).
    """

    decision: Decision
    computation: Optional[WeightComputation] = None
    rejection: Optional[Rejection] = None
    correct_alone: Optional[WeightComputation] = None
    stored_twice: bool = False


def written_elsewhere(
    result: Union[WeightComputation, Rejection, None],
    ep: ExportedProgram,
    written_buffers: AbstractSet[str],
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


# `find_weight_computation` for one GEMM argument, given the inputs that vary.
_Find = Callable[..., Union[WeightComputation, Rejection, None]]


def decide(
    gemm: Node,
    arg_index: int,
    ep: ExportedProgram,
    *,
    arg_positions: tuple[int, ...],
    options: FoldOptions,
    stage: Stage,
    facts: ProgramFacts = NO_FACTS,
    decisions: RoundDecisions = FIRST_ROUND,
    kept: AbstractSet[str] = frozenset(),
    cache: Optional[AnalysisCache] = None,
) -> Optional[Verdict]:
    """The verdict on ``gemm.args[arg_index]``; None when it is absent or a stored tensor
    (nothing to fold: the stock decision stands).

    ``kept``: names of the nodes of ``ep`` kept undecomposed for a fold, which have no
    portable kernel (read at `Stage.EDGE` only; see the module docstring).

    Pure: the verdict is a function of the arguments. It reads ``ep``'s graph, its
    signature and the nodes' values (``meta["val"]``) and site marks, writes nothing,
    and memoizes its sweeps of the graph in ``cache`` (the caller's `AnalysisCache`; by
    default one for this call), which changes no verdict.
    """
    cache = own_cache(cache)
    find: _Find = functools.partial(
        find_weight_computation,
        gemm,
        arg_index,
        ep,
        arg_positions=arg_positions,
        options=options,
        cache=cache,
    )
    others = decisions.non_folding - {gemm.name}
    result = find(stored_elsewhere=facts.stored_elsewhere, non_folding=others)
    # The computation judged as if this method were alone and every other GEMM folded:
    # only the rules within the method apply (other readers, size, budget).
    isolated: Union[WeightComputation, Rejection, None] = None
    stored_twice = False
    if isinstance(result, Rejection):
        if stage is Stage.DELEGATE:
            result = _as_delegated(result, find)
        elif facts.stored_elsewhere or others:
            isolated = find(stored_elsewhere=frozenset(), non_folding=frozenset())
            written = written_elsewhere(isolated, ep, facts.written_buffers)
            if written is not None:
                # The reason that decides: its sources may look kept only because this
                # GEMM, reading a written buffer, will not fold them.
                return Verdict(Decision.DECLINE, rejection=written)
            if isinstance(isolated, WeightComputation) and gemm.name in decisions.fold_anyway:
                result = isolated
            elif isinstance(isolated, Rejection) and isolated.code is BEYOND_BUDGET:
                # Declined by the budget even with nothing else keeping its sources: that
                # is the reason.
                result = isolated
            elif (
                isinstance(isolated, WeightComputation)
                and stage is Stage.EDGE
                and _holds_kept_ops(
                    gemm,
                    ep,
                    arg_positions=arg_positions,
                    options=options,
                    kept=kept,
                    cache=cache,
                )
            ):
                # Declined only to keep the program small, but a computation of this GEMM
                # holds ops kept undecomposed (`_weight_norm`, `stack`) that have no
                # portable kernel: it must be delegated with them folded. Correct, and
                # the shared sources are stored beside the folded value.
                result, stored_twice = isolated, True
    result = written_elsewhere(result, ep, facts.written_buffers) or result
    return _verdict_on(gemm, ep, result, isolated=isolated, stored_twice=stored_twice)


def _as_delegated(rejection: Rejection, find: _Find) -> Union[WeightComputation, Rejection]:
    """Inside a delegate (`Stage.DELEGATE`): the computation, when only the rules that
    keep the program small declined it and folding it is correct; else ``rejection``.

    The partitioner applied the sharing rules to the whole method; here a reader it
    counted can look different (a weight computed at run time in this delegate reads a
    lifted scalar as a delegate input). Folding is correct when only sources are shared
    (they stay for that reader); a shared intermediate would stay too, computed by ops no
    XNNPACK config checked. The growth budget was judged on the whole method."""
    if not rejection.computed_from_constants or rejection.keep_stock:
        return rejection
    correct = find(stored_elsewhere=frozenset(), non_folding=frozenset(), sharing=False)
    if isinstance(correct, WeightComputation) and (
        not correct.shared or rejection.code is BEYOND_BUDGET
    ):
        return correct
    return rejection


def _verdict_on(
    gemm: Node,
    ep: ExportedProgram,
    result: Union[WeightComputation, Rejection, None],
    *,
    isolated: Union[WeightComputation, Rejection, None],
    stored_twice: bool,
) -> Optional[Verdict]:
    """The verdict the ladder's final ``result`` gives: a fold, or for a rejection the
    run-time weight where XNNPACK has that form (`has_run_time_weight_form`) and the
    weight is computed from constants or is a per-sample weight (`per_sample_weight`),
    else a decline; ``isolated`` is kept as what would be correct alone."""
    if result is None:
        return None
    if isinstance(result, WeightComputation):
        return Verdict(Decision.FOLD, computation=result, stored_twice=stored_twice)
    correct_alone = isolated if isinstance(isolated, WeightComputation) else None
    if (
        not result.keep_stock
        and has_run_time_weight_form(gemm, op_name=gemm_op_name(gemm.target), role=result.role)
        and (result.computed_from_constants or per_sample_weight(result, ep))
    ):
        return Verdict(Decision.RUN_TIME, rejection=result, correct_alone=correct_alone)
    return Verdict(Decision.DECLINE, rejection=result, correct_alone=correct_alone)


def per_sample_weight(rejection: Rejection, ep: ExportedProgram) -> bool:
    """Whether ``rejection`` declines a per-sample weight: a matrix computed at run time
    (XNF501) from the program's inputs and from a parameter it reaches without passing
    through another GEMM, such as ``F.linear(x, self.v * s)`` with ``s`` an input.

    Nothing folds such a weight, and XNNPACK's fully-connected op reads it as an input
    and computes what eager computes (linear, addmm, mm; with and without a bias),
    faster than the portable GEMM the stock partitioner leaves it on. The rest keep the
    stock decision, so a program without computed weights is partitioned as stock
    partitions it: an operand that reaches parameters only through the GEMM that
    produced it (attention's ``k.t()``) or reads none (``F.linear(x, w)``, ``w`` an
    input), and a weight that reads no input (computed with a random op, a buffer the
    program writes, a ``cond``). A shape that depends on the inputs is not one XNNPACK
    was checked on, and stays on portable too.
    """
    if rejection.code is not RUN_TIME or rejection.computed_from_constants:
        return False
    root = rejection.gemm.args[rejection.arg_index]
    if not isinstance(root, Node):
        return False
    val = root.meta.get(VAL_META_KEY)
    if not isinstance(val, torch.Tensor) or val.dim() != 2 or free_symbols(val):
        return False
    signature = ep.graph_signature
    parameters = signature.inputs_to_parameters
    user_inputs = set(signature.user_inputs)

    def up_to_gemms(node: Node) -> list[Node]:
        if node.op == "placeholder" or is_gemm(node):
            return []
        return node.all_input_nodes

    def inputs(node: Node) -> list[Node]:
        return node.all_input_nodes

    return any(
        node.op == "placeholder" and node.name in parameters for node in walk([root], up_to_gemms)
    ) and any(
        node.op == "placeholder" and node.name in user_inputs for node in walk([root], inputs)
    )


def _holds_kept_ops(
    gemm: Node,
    ep: ExportedProgram,
    *,
    arg_positions: tuple[int, ...],
    options: FoldOptions,
    kept: AbstractSet[str],
    cache: AnalysisCache,
) -> bool:
    """True when a computation of one of ``gemm``'s arguments holds a node of ``kept``,
    an op the partitioner kept undecomposed (decided before other methods were seen)."""
    if not kept:
        return False
    for index in arg_positions:
        result = find_weight_computation(
            gemm, index, ep, arg_positions=arg_positions, options=options, cache=cache
        )
        if isinstance(result, WeightComputation) and any(n.name in kept for n in result.nodes):
            return True
    return False
