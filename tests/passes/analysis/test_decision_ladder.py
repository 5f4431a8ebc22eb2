"""The decision ladder (`xnnfold.passes.analysis.decide`): every verdict, and every input in
which the stages differ (what the other methods do, the matching round's decisions, the
graph asked about), each on a small exported program, without lowering."""

from __future__ import annotations

from typing import Optional

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.export import ExportedProgram
from torch.fx import Node

from xnnfold._meta import CUSTOM_META_KEY, PRESERVED_META_KEY
from xnnfold.passes._options import FoldOptions, NO_GROWTH
from xnnfold.passes._reason_codes import BEYOND_BUDGET, OTHER_READER, RUN_TIME, WRITTEN_ELSEWHERE
from xnnfold.passes.analysis import (
    decide,
    Decision,
    FIRST_ROUND,
    NO_FACTS,
    ProgramFacts,
    RoundDecisions,
    Stage,
    Verdict,
)

_OPTIONS = FoldOptions()


class _ScaledLinear(nn.Module):
    """``F.linear(x, w * 2)``: a fully-connected weight computed from a parameter."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.w = nn.Parameter(torch.randn(8, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.w * 2.0)


class _ScaledConv(nn.Module):
    """``F.conv1d(x, w * 2)``: a convolution weight computed from a parameter."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.w = nn.Parameter(torch.randn(8, 4, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv1d(x, self.w * 2.0)


class _ConvOtherReader(_ScaledConv):
    """The convolution's weight source is also read by an elementwise op."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return F.conv1d(x, self.w * 2.0) + self.w.sum()


class _ScaledBufferLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.register_buffer("w", torch.randn(8, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.w * 2.0)


class _RunTimeWeight(nn.Module):
    """A linear whose weight is computed from the input: nothing to fold."""

    def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.linear(x, w * 2.0)


class _PerSampleLinear(nn.Module):
    """``F.linear(x, v * s)`` with ``s`` an input: a weight per call, from a parameter."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.v = nn.Parameter(torch.randn(8, 4))

    def forward(self, x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.v * s)


class _PerSampleConv(nn.Module):
    """``F.conv1d(x, v * s)`` with ``s`` an input (StyleGAN2's modulation)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.v = nn.Parameter(torch.randn(8, 4, 3))

    def forward(self, x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return F.conv1d(x, self.v * s)


class _ProjectedOperand(nn.Module):
    """``F.linear(x, k(x) * 2)``: an operand that reaches parameters only through the
    projection that produced it, as attention's ``k.t()`` does."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.k = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.k(x) * 2.0)


class _OtherReader(nn.Module):
    """The source of the computed weight is also read by an elementwise op, so folding
    would store it twice: declined by a rule that keeps the program small."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.w = nn.Parameter(torch.randn(8, 4))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return F.linear(x, self.w * 2.0), self.w + 1.0


class _Broadcast(nn.Module):
    """A convolution whose weight broadcasts a small filter: the fold grows the program."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.f = nn.Parameter(torch.randn(1, 1, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv1d(x, self.f.expand(64, 64, 3))


class _Plain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x)


def _program(module: nn.Module, *inputs: torch.Tensor) -> tuple[ExportedProgram, Node]:
    ep = torch.export.export(module.eval(), inputs)
    (gemm,) = [
        n
        for n in ep.graph.nodes
        if n.op == "call_function"
        and n.target in (torch.ops.aten.linear.default, torch.ops.aten.conv1d.default)
    ]
    return ep, gemm


def _linear(module: nn.Module) -> tuple[ExportedProgram, Node]:
    return _program(module, torch.randn(3, 4))


def _conv(module: nn.Module, channels: int = 4) -> tuple[ExportedProgram, Node]:
    return _program(module, torch.randn(1, channels, 9))


def _decide(
    program: tuple[ExportedProgram, Node],
    *,
    stage: Stage = Stage.EDGE,
    facts: ProgramFacts = NO_FACTS,
    decisions: RoundDecisions = FIRST_ROUND,
    options: FoldOptions = _OPTIONS,
    kept: frozenset[str] = frozenset(),
) -> Optional[Verdict]:
    ep, gemm = program
    return decide(
        gemm,
        1,
        ep,
        arg_positions=(1, 2),
        options=options,
        stage=stage,
        facts=facts,
        decisions=decisions,
        kept=kept,
    )


def _verdict(program: tuple[ExportedProgram, Node], **inputs: object) -> Verdict:
    verdict = _decide(program, **inputs)  # type: ignore[arg-type]
    assert verdict is not None
    return verdict


# --------------------------------------------------------------------------------------
# The verdicts.


def test_a_stored_weight_has_no_verdict() -> None:
    assert _decide(_linear(_Plain())) is None


@pytest.mark.parametrize("stage", list(Stage))
def test_a_computation_of_parameters_folds(stage: Stage) -> None:
    verdict = _verdict(_linear(_ScaledLinear()), stage=stage)
    assert verdict.decision is Decision.FOLD
    assert verdict.computation is not None and verdict.rejection is None
    assert [s.name for s in verdict.computation.sources] == ["p_w"]


def test_a_weight_computed_from_the_input_is_declined() -> None:
    ep, gemm = _program(_RunTimeWeight(), torch.randn(3, 4), torch.randn(8, 4))
    verdict = _verdict((ep, gemm))
    assert verdict.decision is Decision.DECLINE
    assert verdict.rejection is not None and verdict.rejection.code is RUN_TIME


@pytest.mark.parametrize("stage", list(Stage))
def test_a_per_sample_fully_connected_weight_is_taken_at_run_time(stage: Stage) -> None:
    """Nothing folds it; XNNPACK's fully-connected op reads it as an input (checked
    against eager in tests/passes/partition/test_per_sample_weights.py). The rejection says
    what was not folded."""
    program = _program(_PerSampleLinear(), torch.randn(3, 4), torch.randn(8, 1))
    verdict = _verdict(program, stage=stage)
    assert verdict.decision is Decision.RUN_TIME
    assert verdict.rejection is not None and verdict.rejection.code is RUN_TIME


def test_a_bias_computed_from_the_input_is_declined() -> None:
    """Only a weight has the run-time form the ladder delegates."""

    class PerSampleBias(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(8, 4))
            self.b = nn.Parameter(torch.randn(8))

        def forward(self, x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
            return F.linear(x, self.w, self.b * s)

    ep, gemm = _program(PerSampleBias(), torch.randn(3, 4), torch.randn(8))
    verdict = decide(gemm, 2, ep, arg_positions=(1, 2), options=_OPTIONS, stage=Stage.EDGE)
    assert verdict is not None and verdict.decision is Decision.DECLINE
    assert verdict.rejection is not None and verdict.rejection.code is RUN_TIME


def test_a_per_sample_convolution_weight_is_declined() -> None:
    # XNNPACK has no run-time-weight convolution.
    program = _program(_PerSampleConv(), torch.randn(1, 4, 9), torch.randn(8, 1, 1))
    verdict = _verdict(program)
    assert verdict.decision is Decision.DECLINE
    assert verdict.rejection is not None and verdict.rejection.code is RUN_TIME


def test_an_operand_projected_by_another_gemm_keeps_the_stock_decision() -> None:
    ep = torch.export.export(_ProjectedOperand().eval(), (torch.randn(4, 4),))
    outer = [n for n in ep.graph.nodes if n.target is torch.ops.aten.linear.default][-1]
    assert _verdict((ep, outer)).decision is Decision.DECLINE


class _RandomWeight(nn.Module):
    """Computed at run time from a parameter, but from no input."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.w + 0.0 * torch.rand(8, 4))


class _CountedWeight(_RandomWeight):
    """Computed at run time from a parameter and a buffer it writes, from no input."""

    calls: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.w * self.calls.add_(1.0))


@pytest.mark.parametrize("module", [_RandomWeight, _CountedWeight], ids=["random", "written"])
def test_a_weight_computed_at_run_time_from_no_input_keeps_the_stock_decision(
    module: type[nn.Module],
) -> None:
    assert _verdict(_linear(module())).decision is Decision.DECLINE


def test_a_per_sample_weight_of_a_size_set_by_the_input_is_declined() -> None:
    """A weight whose shape depends on the inputs is not one XNNPACK was checked on."""

    class RowsFromInput(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.v = nn.Parameter(torch.randn(1, 4))

        def forward(self, x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
            return F.linear(x, s.unsqueeze(1) * self.v)

    rows = torch.export.Dim("rows", min=2, max=64)
    ep = torch.export.export(
        RowsFromInput().eval(),
        (torch.randn(3, 4), torch.randn(8)),
        dynamic_shapes=(None, {0: rows}),
    )
    (gemm,) = [n for n in ep.graph.nodes if n.target is torch.ops.aten.linear.default]
    assert _verdict((ep, gemm)).decision is Decision.DECLINE


def test_a_fully_connected_weight_declined_for_size_is_taken_at_run_time() -> None:
    verdict = _verdict(_linear(_OtherReader()))
    assert verdict.decision is Decision.RUN_TIME
    assert verdict.rejection is not None and verdict.rejection.code is OTHER_READER


def test_a_convolution_weight_declined_for_size_is_declined() -> None:
    # A convolution has no run-time-weight form in XNNPACK.
    verdict = _verdict(_conv(_ConvOtherReader()))
    assert verdict.decision is Decision.DECLINE
    assert verdict.rejection is not None and verdict.rejection.code is OTHER_READER


def test_a_growing_convolution_fold_beyond_the_budget_is_declined_with_its_code() -> None:
    verdict = _verdict(
        _conv(_Broadcast(), channels=64), options=FoldOptions(growth_budget=NO_GROWTH)
    )
    assert verdict.decision is Decision.DECLINE
    assert verdict.rejection is not None and verdict.rejection.code is BEYOND_BUDGET


# --------------------------------------------------------------------------------------
# What the other methods do (`ProgramFacts`).


def test_a_source_another_method_stores_is_not_folded() -> None:
    facts = ProgramFacts(stored_elsewhere=frozenset({"w"}))
    verdict = _verdict(_linear(_ScaledLinear()), facts=facts)
    assert verdict.decision is Decision.RUN_TIME
    # Correct to fold were the method alone: the fixed point may still fold it.
    assert verdict.correct_alone is not None


def test_a_buffer_another_method_writes_is_declined_and_kept_as_stock_leaves_it() -> None:
    facts = ProgramFacts(written_buffers=frozenset({"w"}))
    verdict = _verdict(_linear(_ScaledBufferLinear()), facts=facts)
    assert verdict.decision is Decision.DECLINE
    assert verdict.rejection is not None
    assert verdict.rejection.code is WRITTEN_ELSEWHERE and verdict.rejection.keep_stock
    assert verdict.correct_alone is None


def test_a_written_buffer_decides_even_when_its_source_is_stored_elsewhere() -> None:
    facts = ProgramFacts(written_buffers=frozenset({"w"}), stored_elsewhere=frozenset({"w"}))
    verdict = _verdict(_linear(_ScaledBufferLinear()), facts=facts)
    assert verdict.rejection is not None and verdict.rejection.code is WRITTEN_ELSEWHERE


# --------------------------------------------------------------------------------------
# The round's decisions (`RoundDecisions`).


def test_a_gemm_the_round_must_fold_anyway_folds() -> None:
    program = _linear(_ScaledLinear())
    facts = ProgramFacts(stored_elsewhere=frozenset({"w"}))
    _, gemm = program
    decisions = RoundDecisions(fold_anyway=frozenset({gemm.name}))
    assert _verdict(program, facts=facts, decisions=decisions).decision is Decision.FOLD
    assert _verdict(program, facts=facts).decision is Decision.RUN_TIME


def test_a_gemm_named_non_folding_is_not_a_reader_of_its_own_sources() -> None:
    program = _linear(_ScaledLinear())
    _, gemm = program
    decisions = RoundDecisions(non_folding=frozenset({gemm.name}))
    assert _verdict(program, decisions=decisions).decision is Decision.FOLD


# --------------------------------------------------------------------------------------
# Where the graphs differ (`Stage`).


def _weight_name(program: tuple[ExportedProgram, Node]) -> str:
    """The name of the node computing the GEMM's weight (the `mul`)."""
    _, gemm = program
    weight = gemm.args[1]
    assert isinstance(weight, Node)
    return weight.name


@pytest.mark.parametrize(
    ("stage", "decision", "stored_twice"),
    [
        (Stage.EDGE, Decision.FOLD, True),
        (Stage.ATEN, Decision.RUN_TIME, False),
    ],
)
def test_a_kept_op_makes_the_edge_graph_fold_what_only_size_declines(
    stage: Stage, decision: Decision, stored_twice: bool
) -> None:
    """On the edge program a kept op has no portable kernel, so a computation holding one
    is folded though another method stores its source; on the ATen program nothing is
    kept yet, so the size rule stands."""
    program = _linear(_ScaledLinear())
    facts = ProgramFacts(stored_elsewhere=frozenset({"w"}))
    verdict = _verdict(program, stage=stage, facts=facts, kept=frozenset({_weight_name(program)}))
    assert verdict.decision is decision
    assert verdict.stored_twice is stored_twice


def test_the_kept_ops_reach_the_ladder_only_as_its_argument() -> None:
    """A node carrying the decomposition filter's mark in its metadata, but not named in
    ``kept``, is not a kept op to the ladder: it reads what it is given, not node.meta."""
    program = _linear(_ScaledLinear())
    _, gemm = program
    weight = gemm.args[1]
    assert isinstance(weight, Node)
    weight.meta[CUSTOM_META_KEY] = {
        **weight.meta.get(CUSTOM_META_KEY, {}),
        PRESERVED_META_KEY: True,
    }
    facts = ProgramFacts(stored_elsewhere=frozenset({"w"}))
    verdict = _verdict(program, stage=Stage.EDGE, facts=facts)
    assert verdict.decision is Decision.RUN_TIME
    assert not verdict.stored_twice


@pytest.mark.parametrize(
    ("stage", "decision"),
    [
        (Stage.DELEGATE, Decision.FOLD),
        (Stage.EDGE, Decision.RUN_TIME),
        (Stage.ATEN, Decision.RUN_TIME),
    ],
)
def test_inside_a_delegate_only_the_rules_that_make_a_fold_wrong_decline(
    stage: Stage, decision: Decision
) -> None:
    """The partitioner accepted the fold on the whole method; inside the delegate another
    reader of a source only keeps that source beside the folded value."""
    assert _verdict(_linear(_OtherReader()), stage=stage).decision is decision


@pytest.mark.parametrize("stage", list(Stage))
def test_no_stage_folds_a_computation_at_run_time(stage: Stage) -> None:
    ep, gemm = _program(_RunTimeWeight(), torch.randn(3, 4), torch.randn(8, 4))
    assert _verdict((ep, gemm), stage=stage).decision is Decision.DECLINE
