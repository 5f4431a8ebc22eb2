"""tests/README.md maps every module of xnnfold/ to its tests, and every test file to its
tiers: a module or a test file added without a row, or a row naming a path that is gone,
fails here, so the map stays the one a newcomer can trust."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[2]
MAP = ROOT / "tests" / "README.md"
# A section row of the module table: "| **marking** (`xnnfold/rewriter/`) | |".
_SECTION = re.compile(r"^\| \*\*[^*]+\*\* \(`(xnnfold/[^`]*)`\) \|")
_NAME = re.compile(r"`([^`]+)`")


def _table(title: str) -> list[str]:
    """The rows of the table under the ``## title`` heading."""
    text = MAP.read_text()
    section = text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    return [line for line in section.splitlines() if line.startswith("|")][2:]


def _modules_named() -> set[Path]:
    """The modules the "By module" table names, each name resolved in its section's
    folder (a name ending in ``/`` stands for every module below it)."""
    named: set[Path] = set()
    folder = None
    for row in _table("By module"):
        section = _SECTION.match(row)
        if section:
            folder = ROOT / section.group(1)
            continue
        assert folder is not None, f"a module row before any section row: {row}"
        for name in _NAME.findall(row.split("|")[1]):
            path = folder / name
            named |= set(path.rglob("*.py")) if name.endswith("/") else {path}
    return named


def _modules() -> set[Path]:
    return set((ROOT / "xnnfold").rglob("*.py"))


def _test_files() -> set[Path]:
    return set((ROOT / "tests").rglob("test_*.py"))


def test_every_module_has_a_row() -> None:
    missing = sorted(str(p.relative_to(ROOT)) for p in _modules() - _modules_named())
    assert not missing, f"add these modules to tests/README.md: {missing}"


def test_every_module_row_names_a_module() -> None:
    gone = sorted(str(p.relative_to(ROOT)) for p in _modules_named() - _modules())
    assert not gone, f"tests/README.md names modules that do not exist: {gone}"


def test_every_test_file_it_names_exists() -> None:
    named = {ROOT / name for name in _NAME.findall(MAP.read_text()) if name.startswith("tests/")}
    gone = sorted(str(p.relative_to(ROOT)) for p in named if not p.exists())
    assert not gone, f"tests/README.md names test files that do not exist: {gone}"


def test_every_test_file_has_its_tiers() -> None:
    listed = {ROOT / _NAME.findall(row)[0] for row in _table("By file: the tiers")}
    missing = sorted(str(p.relative_to(ROOT)) for p in _test_files() - listed)
    assert not missing, f"give these test files a row in tests/README.md: {missing}"


def test_every_module_row_names_a_test_file() -> None:
    untested = [
        row
        for row in _table("By module")
        if not _SECTION.match(row)
        and not any(n.startswith("tests/") for n in _NAME.findall(row.split("|")[2]))
    ]
    assert not untested, f"rows of tests/README.md with no test file: {untested}"
