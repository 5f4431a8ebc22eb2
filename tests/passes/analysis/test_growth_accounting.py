"""The growth budget's arithmetic (`_growth.admit`), without a program: which groups of
growing folds a budget admits, in program order."""

from __future__ import annotations

import pytest

from xnnfold import DEFAULT_GROWTH_BUDGET, GrowthBudget, NO_GROWTH, XnnpackFoldingPartitioner
from xnnfold.passes.analysis._growth import admit, Growth, program_cap

_KIB = 1024


def _grows(group: str, added: int, freed: int = 48) -> Growth:
    return Growth(group, folded=added + freed, freed=freed)


def _admitted(growths: list[Growth], budget: GrowthBudget, program: int) -> list[str]:
    ledger = admit(growths, budget, program)
    return [group for group, why in ledger.verdicts.items() if why is None]


def test_a_fold_within_both_caps_is_admitted() -> None:
    assert _admitted([_grows("a", 10 * _KIB)], DEFAULT_GROWTH_BUDGET, 10_000_000) == ["a"]


def test_a_fold_above_the_per_fold_cap_is_declined_whatever_the_program() -> None:
    budget = GrowthBudget(max_fold_bytes=64 * _KIB, max_program_fraction=1.0)
    ledger = admit([_grows("a", 64 * _KIB + 1)], budget, 10**9)
    assert ledger.verdicts["a"] == "one fold may add at most 65536 bytes"


def test_the_per_fold_cap_is_inclusive() -> None:
    budget = GrowthBudget(max_fold_bytes=100, max_program_fraction=0.0)
    assert _admitted([_grows("a", 100)], budget, 0) == ["a"]


def test_folds_are_admitted_in_order_until_the_program_cap_is_spent() -> None:
    # 5% of 1,000,000 bytes: 50,000; of three folds of 20,000 two fit, a smaller one after.
    budget = GrowthBudget(max_fold_bytes=30_000, max_program_fraction=0.05)
    growths = [_grows(g, 20_000) for g in "abc"] + [_grows("d", 10_000)]
    ledger = admit(growths, budget, 1_000_000)
    assert [g for g, why in ledger.verdicts.items() if why is None] == ["a", "b", "d"]
    assert "earlier folds left 10000" in (ledger.verdicts["c"] or "")


def test_the_program_cap_is_never_below_one_fold() -> None:
    # A 64-byte model may still take one 960-byte fold (the expanded_kernel fixture).
    assert program_cap(DEFAULT_GROWTH_BUDGET, 64) == 64 * _KIB
    assert program_cap(DEFAULT_GROWTH_BUDGET, 100 * 2**20) == 5 * 2**20


def test_a_group_is_counted_once() -> None:
    """Folds sharing sources arrive as one group from each of their GEMMs."""
    budget = GrowthBudget(max_fold_bytes=1000, max_program_fraction=0.0)
    growths = [_grows("shared", 600), _grows("shared", 600), _grows("other", 400)]
    assert _admitted(growths, budget, 0) == ["shared", "other"]


def test_no_growth_declines_every_growing_fold() -> None:
    ledger = admit([_grows("a", 1)], NO_GROWTH, 10**9)
    assert ledger.verdicts["a"] == "growth_budget is NO_GROWTH"


def test_a_group_the_ledger_did_not_see_is_judged_alone() -> None:
    budget = GrowthBudget(max_fold_bytes=1000, max_program_fraction=0.0)
    ledger = admit([_grows("a", 900)], budget, 0)
    assert ledger.verdict(_grows("unseen", 900)) is None
    assert ledger.verdict(_grows("unseen", 1001)) is not None


@pytest.mark.parametrize(
    "fields",
    [(-1, 0.05), (1.5, 0.05), (True, 0.05), (1024, -0.1), (1024, float("inf")), (1024, "5%")],
)
def test_a_budget_out_of_range_is_refused_naming_the_field(fields: tuple[object, object]) -> None:
    with pytest.raises(ValueError, match="GrowthBudget.max_"):
        GrowthBudget(*fields)  # type: ignore[arg-type]


def test_the_partitioner_refuses_a_budget_that_is_not_a_growth_budget() -> None:
    with pytest.raises(TypeError, match="XnnpackFoldingPartitioner: growth_budget must be"):
        XnnpackFoldingPartitioner(growth_budget=65536)  # type: ignore[arg-type]


def test_the_partitioner_carries_its_budget_in_its_options() -> None:
    budget = GrowthBudget(max_fold_bytes=100, max_program_fraction=0.0)
    assert XnnpackFoldingPartitioner(growth_budget=budget).options.growth_budget is budget
