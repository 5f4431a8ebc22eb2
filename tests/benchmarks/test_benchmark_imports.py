"""Every import a benchmark script makes names a module that exists.

The scripts import lazily, inside the functions that need a library, so a module that
moves (the sweeps' re-cut into a package) leaves a script that fails only when run: here
every ``import`` and ``from ... import`` in benchmarks/, at any depth, is resolved
without running it. A module of this repository must exist under its full dotted name
(or beside the script, which puts its folder on ``sys.path``);
another package's root must be installed, or be one of the optional packages a script
names in its docstring (`OPTIONAL`).
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted((ROOT / "benchmarks").rglob("*.py"))
# Packages a benchmark imports only where its model family needs them (not installed by
# the `test` extra): bigvgan for bench_bigvgan, timm (and its torchvision) for the timm
# sweep, transformers for its sweep and exporter benchmarks.
OPTIONAL = frozenset({"bigvgan", "timm", "torchvision", "transformers"})
OURS = frozenset({"benchmarks", "tests", "xnnfold"})


def _imported(path: Path) -> list[tuple[int, str]]:
    """(line, dotted module) of each absolute import in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.lineno, node.module))
    return found


def _exists(module: str, script: Path) -> bool:
    root = module.split(".")[0]
    if (script.parent / f"{root}.py").is_file():
        return True  # a module beside the script, which puts its folder on sys.path
    if root in OURS:
        parts = ROOT.joinpath(*module.split("."))
        return parts.with_suffix(".py").is_file() or (parts / "__init__.py").is_file()
    return root in OPTIONAL or importlib.util.find_spec(root) is not None


@pytest.mark.parametrize("path", SCRIPTS, ids=[p.relative_to(ROOT).as_posix() for p in SCRIPTS])
def test_every_import_of_a_benchmark_resolves(path: Path) -> None:
    missing = [
        f"{path.name}:{line}: {module}"
        for line, module in _imported(path)
        if not _exists(module, path)
    ]
    assert not missing, "\n".join(missing)
