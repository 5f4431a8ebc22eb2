"""README.md stays a first page: short, the map named early, no dates or history.

Details belong in docs/ and benchmarks/; a newcomer reads the README first and
docs/architecture.md next. Standard library only.
"""

from __future__ import annotations

import re

from tests.docs._snippets import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
MAX_LINES = 160
# The first screen: what a newcomer sees before scrolling.
FIRST_SCREEN = 24
_DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
_ISSUE = re.compile(r"(?<![\w/])#\d+\b|\bissue \d+", re.IGNORECASE)
_LOAD = re.compile(r"load average", re.IGNORECASE)


def test_readme_fits_a_first_page() -> None:
    assert len(README) <= MAX_LINES, (
        f"README.md has {len(README)} lines (at most {MAX_LINES}): move details to docs/"
    )


def test_readme_names_the_map_on_its_first_screen() -> None:
    assert any("docs/architecture.md" in line for line in README[:FIRST_SCREEN])


def test_readme_has_no_dates_issue_numbers_or_machine_load() -> None:
    found = [
        f"README.md:{number}: {line.strip()}"
        for number, line in enumerate(README, start=1)
        if _DATE.search(line) or _ISSUE.search(line) or _LOAD.search(line)
    ]
    assert found == []
