"""Test tiers, and collection order for two workers.

Tiers (``--tier``, default ``fast``; docs: CONTRIBUTING.md):

- ``fast``: what a plain ``pytest`` runs, in a few minutes on one core: the unit tier,
  the codemod, the install checks, and one end-to-end case of each behaviour.
- ``full``: adds every test marked ``slow`` (the cases and sweeps of each behaviour, the
  full-size models, the seeded differential slice); CI runs it on the default stack.
- ``campaign``: adds every test marked ``campaign`` (the longest chains, the whole-fixture
  sweeps, the larger differential budget): ``pytest --tier campaign -n 2``.

A test belongs to the lowest tier that runs it; a tier runs every test of the tiers below
it. The tier deselects (it never skips), and the summary says how many it left out.

Collection order: CI runs ``-n 2 --dist loadfile --no-loadscope-reorder``: each file stays
whole on one worker (its module-level lowerings are shared by its tests), and files are
handed out in collection order. Longest first, the short files fill in around the long
ones and both workers finish together.

After a run that includes the documentation's python blocks (`tests/docs`), the summary
lists every block opted out of running and every block that needs an optional module. It
is here, not in tests/docs, because under xdist only the top conftest reaches the
controller, which prints the summary.

Standard library only: the codemod's tests run where torch is not installed.
"""

from __future__ import annotations

import os

import pytest

TIERS = ("fast", "full", "campaign")
# Marker -> the lowest tier that runs a test carrying it.
TIER_MARKERS = {"slow": "full", "campaign": "campaign"}
TIER_ENVIRONMENT_VARIABLE = "XNNFOLD_TEST_TIER"

# Longest first, as measured by `pytest --junitxml --tier full` on the default stack
# (each over a minute of one worker's time; the rest of the files take under one).
LONGEST_FIRST = (
    "tests/end_to_end/test_differential.py",
    "tests/recipes/test_recipes.py",
    "tests/passes/partition/test_shared.py",
    "tests/end_to_end/test_transformers_models.py",
    "tests/passes/partition/test_boundaries.py",
    "tests/integrations/test_transformers_exporter.py",
    "tests/passes/partition/test_growth_budget.py",
    "tests/passes/partition/test_decompositions.py",
    "tests/end_to_end/test_end_to_end.py",
    "tests/passes/partition/test_addmm_arguments.py",
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--tier",
        choices=TIERS,
        default=os.environ.get(TIER_ENVIRONMENT_VARIABLE, "fast"),
        help=f"which test tier to run: {', '.join(TIERS)} (default: fast, or "
        f"${TIER_ENVIRONMENT_VARIABLE}); each tier includes the ones before it",
    )


def tier_of(item: pytest.Item) -> str:
    """The lowest tier that runs ``item``."""
    needed = [TIERS.index(t) for m, t in TIER_MARKERS.items() if item.get_closest_marker(m)]
    return TIERS[max(needed, default=0)]


def split_by_tier(
    items: list[pytest.Item], tier: str
) -> tuple[list[pytest.Item], list[pytest.Item]]:
    """``items`` that ``tier`` runs, and those it leaves to a higher tier."""
    limit = TIERS.index(tier)
    kept = [item for item in items if TIERS.index(tier_of(item)) <= limit]
    left_out = [item for item in items if TIERS.index(tier_of(item)) > limit]
    return kept, left_out


def longest_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """``items`` with the files of `LONGEST_FIRST` first, in its order; stable, so every
    file keeps its tests' order and the other files keep theirs."""
    rank = {path: index for index, path in enumerate(LONGEST_FIRST)}
    return sorted(items, key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    kept, left_out = split_by_tier(items, config.getoption("--tier"))
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        config.stash[_LEFT_OUT] = len(left_out)
    items[:] = longest_first(kept)


_LEFT_OUT = pytest.StashKey[int]()


def pytest_report_header(config: pytest.Config) -> str:
    return f"xnnfold test tier: {config.getoption('--tier')} (--tier {'|'.join(TIERS)})"


# The snippet tests' ids start with this (tests/docs/test_snippets.py).
SNIPPET_TEST_PREFIX = "tests/docs/test_snippets.py::test_snippet_runs"


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    left_out = config.stash.get(_LEFT_OUT, 0)
    if left_out:
        terminalreporter.write_line(
            f"tier {config.getoption('--tier')}: {left_out} tests of higher tiers deselected "
            "(--tier full or --tier campaign runs them)"
        )
    ran = any(
        isinstance(report, pytest.TestReport) and report.nodeid.startswith(SNIPPET_TEST_PREFIX)
        for reports in terminalreporter.stats.values()
        for report in reports
    )
    if not ran:
        return
    from tests.docs._snippets import collect, summary_lines

    terminalreporter.write_sep("-", "documentation snippets")
    for line in summary_lines(collect()[0]):
        terminalreporter.write_line(line)
