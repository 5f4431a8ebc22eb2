"""Every relative link and every repository path the documentation names exists.

README.md and docs/*.md point readers at each other and at the code: a Markdown link
``[text](docs/limits.md)``, or a path in backticks such as ``tests/passes/fold/test_hook.py``.
A file that moves without its references leaves the reader at a dead end; here that fails
the document's test, naming the line. External links (``https://...``) and globs are not
checked. So does a benchmark command (``python benchmarks/timing/bench_fold.py``, ``python
-m benchmarks.sweeps.timm``) whose script is gone, in the documents and the benchmarks'
index.
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


# A benchmark command, in prose or in a code block: a script path or a module.
_SCRIPT = re.compile(r"python (?P<path>benchmarks/[A-Za-z0-9_./-]+\.py)")
_MODULE = re.compile(r"python -m (?P<module>benchmarks(?:\.[A-Za-z0-9_]+)+)")
# Where commands are given to run: the documents, and the benchmarks' index (the result
# files beside the scripts record the commands that made them, where they then were).
COMMAND_DOCUMENTS = (*DOCUMENTS, ROOT / "benchmarks" / "README.md")


def _missing_scripts(path: Path) -> list[str]:
    missing = []
    for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        for match in _SCRIPT.finditer(text):
            if not (ROOT / match["path"]).is_file():
                missing.append(f"{path.relative_to(ROOT)}:{number}: {match['path']}")
        for match in _MODULE.finditer(text):
            module = ROOT.joinpath(*match["module"].split("."))
            if not (module.with_suffix(".py").is_file() or (module / "__main__.py").is_file()):
                missing.append(f"{path.relative_to(ROOT)}:{number}: -m {match['module']}")
    return missing


@pytest.mark.parametrize(
    "path", COMMAND_DOCUMENTS, ids=[p.relative_to(ROOT).as_posix() for p in COMMAND_DOCUMENTS]
)
def test_every_benchmark_command_runs_a_script_that_exists(path: Path) -> None:
    missing = _missing_scripts(path)
    assert not missing, "\n".join(missing)
