"""The sweeps (benchmarks/sweeps) use xnnfold's public API only: no module of theirs
imports a private xnnfold module or name (a ``_``-prefixed one) or a test module."""

from __future__ import annotations

import ast
from pathlib import Path

SWEEPS = Path(__file__).parents[2] / "benchmarks" / "sweeps"


def _private_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            modules = [node.module]
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            modules, names = [alias.name for alias in node.names], []
        else:
            continue
        for module in modules:
            parts = module.split(".")
            if parts[0] == "tests" or (
                parts[0] == "xnnfold"
                and (any(p.startswith("_") for p in parts) or any(n.startswith("_") for n in names))
            ):
                found.append(f"{path.relative_to(SWEEPS)}:{node.lineno}: {module} {names}")
    return found


def test_no_sweep_module_imports_an_xnnfold_private_or_a_test() -> None:
    modules = sorted(SWEEPS.rglob("*.py"))
    assert len(modules) > 20
    assert [found for path in modules for found in _private_imports(path)] == []
