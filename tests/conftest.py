"""Collection order for two workers, and the documentation snippets' summary.

Collection order: the test files that take minutes go first.

CI runs ``-n 2 --dist loadfile --no-loadscope-reorder``: each file stays whole on one
worker (its module-level lowerings are shared by its tests), and files are handed out in
collection order. xdist's default order (most tests first) is not longest first: the
three longest files landed on one worker, which ran minutes after the other had
finished; longest first, the short files fill in around them and both workers finish
together.

After a run that includes the documentation's python blocks (`tests/docs`), the summary
lists every block opted out of running and every block that needs an optional module. It
is here, not in tests/docs, because under xdist only the top conftest reaches the
controller, which prints the summary.

Standard library only: the codemod's tests run where torch is not installed.
"""

from __future__ import annotations

import pytest

# Longest first, as measured by `pytest --junitxml` on the default stack (minutes of one
# worker's time; the rest of the files take under 2.5 each).
LONGEST_FIRST = (
    "tests/end_to_end/test_differential.py",  # ~14
    "tests/partition/test_decompositions.py",  # ~8
    "tests/partition/test_long_computations.py",  # ~4
    "tests/end_to_end/test_generated_models.py",  # ~3.5
    "tests/end_to_end/test_architectures.py",  # ~3
    "tests/partition/test_shared.py",  # ~2.5
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {path: index for index, path in enumerate(LONGEST_FIRST)}
    # Stable: every file keeps its tests' order, and the other files keep theirs.
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


# The snippet tests' ids start with this (tests/docs/test_snippets.py).
SNIPPET_TEST_PREFIX = "tests/docs/test_snippets.py::test_snippet_runs"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
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
