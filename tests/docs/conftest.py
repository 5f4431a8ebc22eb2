"""After a run that includes the documentation's snippets, list every block opted out."""

from __future__ import annotations

import pytest

from tests.docs._snippets import collect


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    ran = any(
        getattr(report, "nodeid", "").startswith("tests/docs/test_snippets.py::test_snippet_runs")
        for reports in terminalreporter.stats.values()
        for report in reports
    )
    if not ran:
        return
    snippets, _ = collect()
    opted_out = [s for s in snippets if s.skip is not None]
    needing = [s for s in snippets if s.requires is not None]
    terminalreporter.write_sep("-", "documentation snippets")
    terminalreporter.write_line(
        f"{len(snippets)} python blocks: {len(opted_out)} opted out, "
        f"{len(needing)} needing an optional module"
    )
    for s in opted_out:
        terminalreporter.write_line(f"  opted out: {s.name}: {s.skip}")
    for s in needing:
        terminalreporter.write_line(f"  requires {s.requires}: {s.name}")
