"""What the partitioner writes after its final round (`passes/partition/_outcome.py`), from
the values the stage found: one fold mark per delegated GEMM with something to fold, and
one reason per GEMM, each decided from values and written by one function."""

from __future__ import annotations

from types import MappingProxyType
from typing import Optional

import pytest
import torch
from torch import nn
from torch.export import ExportedProgram
from torch.fx import Node

from xnnfold._meta import FOLD_META_KEY, REASON_META_KEY
from xnnfold.passes import FoldOptions
from xnnfold.passes._marks import fold_mark_of, FoldMark, GemmReason, reason_of
from xnnfold.passes._reason_codes import BEYOND_BUDGET, OTHER_READER, Problem, STOCK, TIED_OTHER_USE
from xnnfold.passes.analysis import Rejection, UntiedTable
from xnnfold.passes.partition._findings import Findings
from xnnfold.passes.partition._outcome import (
    fold_mark,
    gemm_reason,
    record_reasons,
    write_fold_marks,
)

OPTIONS = FoldOptions(max_fold_nodes=7)


def _frozen(**values: object) -> MappingProxyType:
    return MappingProxyType(dict(values))


def _two_linears() -> tuple[ExportedProgram, list[Node]]:
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    ep = torch.export.export(model.eval(), (torch.randn(2, 4),))
    gemms = [n for n in ep.graph.nodes if n.target is torch.ops.aten.linear.default]
    return ep, gemms


def _rejection(gemm: Node, code: object = OTHER_READER) -> Rejection:
    return Rejection(gemm, 1, "weight", "its source is read elsewhere", True, None, code)  # type: ignore[arg-type]


def test_the_mark_holds_the_folds_scales_options_and_growth_of_its_gemm() -> None:
    findings = Findings(
        folds=_frozen(mm=MappingProxyType({2: "w", 0: None})),
        scales=_frozen(mm=MappingProxyType({0: 0.5})),
        growth=_frozen(mm=MappingProxyType({1: (8, "other"), 2: (64, "g")})),
    )
    mark = fold_mark("mm", findings, OPTIONS)
    # In the order found; only the folded arguments' growth.
    assert mark == FoldMark(OPTIONS, ((2, "w"), (0, None)), ((0, 0.5),), ((2, 64, "g"),))
    assert fold_mark("other", findings, OPTIONS) is None


def test_marks_go_onto_delegated_gemms_only_and_replace_copied_ones() -> None:
    ep, (first, second) = _two_linears()
    stale = FoldMark(FoldOptions(), ((1, None),))
    first.meta[FOLD_META_KEY] = second.meta[FOLD_META_KEY] = stale
    folds = {first.name: MappingProxyType({1: None}), second.name: MappingProxyType({1: None})}
    findings = Findings(folds=MappingProxyType(folds))
    write_fold_marks(ep, findings, OPTIONS, delegated=frozenset({first.name}))
    assert fold_mark_of(first) == FoldMark(OPTIONS, ((1, None),))
    assert FOLD_META_KEY not in second.meta


def _reason(
    *,
    delegated: bool,
    rejection: Optional[Rejection] = None,
    problem: Optional[Problem] = None,
    stock: Optional[str] = None,
    untied: Optional[UntiedTable] = None,
    growth: Optional[dict[int, tuple[int, str]]] = None,
) -> Optional[GemmReason]:
    return gemm_reason(
        "linear",
        delegated=delegated,
        rejection=rejection,
        problem=problem,
        stock_reason=stock,
        untied=untied,
        growth=growth or {},
    )


def test_a_table_stored_twice_is_the_reason_of_a_delegated_gemm_with_no_other() -> None:
    _, (gemm, _) = _two_linears()
    untied = UntiedTable("p_weight", "0.weight", gemm.name, TIED_OTHER_USE)
    reason = _reason(delegated=True, untied=untied)
    assert reason is not None and reason.code == TIED_OTHER_USE.code
    assert reason.text.endswith("(0.weight)")
    # A weight taken at run time says more about the GEMM: it decides.
    run_time = _reason(delegated=True, rejection=_rejection(gemm), untied=untied)
    assert run_time is not None and run_time.code == OTHER_READER.code
    assert run_time.text.startswith("its weight is computed at run time, not folded")
    assert _reason(delegated=True) is None


def test_outside_a_delegate_the_argument_problem_then_the_rejection_then_stock_decide() -> None:
    _, (gemm, _) = _two_linears()
    problem = Problem(STOCK, "its bias is (M, N)")
    rejection = _rejection(gemm)
    chosen = _reason(delegated=False, problem=problem, rejection=rejection, stock="stock says")
    assert chosen == GemmReason("its bias is (M, N)", STOCK.code)
    chosen = _reason(delegated=False, rejection=rejection, stock="stock says")
    assert chosen is not None and chosen.code == OTHER_READER.code
    assert _reason(delegated=False, stock="stock says") == GemmReason("stock says", STOCK.code)
    assert _reason(delegated=False) is None


@pytest.mark.parametrize("code", [BEYOND_BUDGET, OTHER_READER])
def test_only_the_growth_budgets_decline_carries_the_growth_refused(code: object) -> None:
    _, (gemm, _) = _two_linears()
    reason = _reason(
        delegated=False, rejection=_rejection(gemm, code), growth={1: (4096, "g"), 2: (8, "g")}
    )
    assert reason is not None
    expected = ((1, 4096, "g"), (2, 8, "g")) if code is BEYOND_BUDGET else ()
    assert reason.growth == expected


def test_record_reasons_is_the_one_writer_and_replaces_copied_reasons() -> None:
    ep, (first, second) = _two_linears()
    first.meta[REASON_META_KEY] = second.meta[REASON_META_KEY] = GemmReason("stale", "XNF501")
    untied = UntiedTable("p_weight", "0.weight", first.name, TIED_OTHER_USE)
    record_reasons(
        ep,
        delegated=frozenset({first.name}),
        stock_reasons={second.name: "stock says"},
        findings=Findings(),
        untied=(untied,),
    )
    first_reason, second_reason = reason_of(first), reason_of(second)
    assert first_reason is not None and first_reason.code == TIED_OTHER_USE.code
    assert second_reason == GemmReason("stock says", STOCK.code)
