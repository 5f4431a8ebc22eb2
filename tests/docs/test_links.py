"""Every relative link and every repository path the documentation names exists.

README.md and docs/*.md point readers at each other and at the code: a Markdown link
``[text](docs/limits.md)``, or a path in backticks such as ``tests/passes/fold/test_hook.py``.
A file that moves without its references leaves the reader at a dead end; here that fails
the document's test, naming the line. External links (``https://...``) and globs are not
checked.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.docs._snippets import DOCUMENTS, ROOT

_LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")
# A path in backticks that starts at a top-level directory of the repository.
_PATH = re.compile(r"`(?P<path>(?:xnnfold|tests|benchmarks|docs|\.ci)/[A-Za-z0-9_./-]*)`")
_FENCE = re.compile(r"^\s*```")


def _prose_lines(path: Path) -> list[tuple[int, str]]:
    """The lines outside code blocks, numbered from 1."""
    lines, inside = [], False
    for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if _FENCE.match(text):
            inside = not inside
        elif not inside:
            lines.append((number, text))
    return lines


def _missing_links(path: Path) -> list[str]:
    missing = []
    for number, text in _prose_lines(path):
        for match in _LINK.finditer(text):
            target = match["target"].split("#", 1)[0]
            if not target or re.match(r"^[a-z]+:", target):
                continue
            if not (path.parent / target).exists():
                missing.append(f"{path.relative_to(ROOT)}:{number}: link to {target}")
    return missing


def _missing_paths(path: Path) -> list[str]:
    missing = []
    for number, text in _prose_lines(path):
        for match in _PATH.finditer(text):
            if not (ROOT / match["path"]).exists():
                missing.append(f"{path.relative_to(ROOT)}:{number}: {match['path']}")
    return missing


IDS = [p.relative_to(ROOT).as_posix() for p in DOCUMENTS]


@pytest.mark.parametrize("path", DOCUMENTS, ids=IDS)
def test_every_relative_link_resolves(path: Path) -> None:
    missing = _missing_links(path)
    assert not missing, "\n".join(missing)


@pytest.mark.parametrize("path", DOCUMENTS, ids=IDS)
def test_every_repository_path_named_exists(path: Path) -> None:
    missing = _missing_paths(path)
    assert not missing, "\n".join(missing)
