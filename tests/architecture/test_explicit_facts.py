"""Every folding partitioner xnnfold builds is given its lowering's `CrossMethodFacts`.

`xnnfold.lower`, the ``export`` command, the recipes, the transformers integration and
the benchmarks build their partitioners with ``facts=``; the construction-bound fallback
(`facts_for_new_partitioner`: partitioners built one after another in a thread share one
object) is for partitioners users build by hand, such as the entries of a
``partitioner={...}`` dict (docs/architecture.md, "Process state"). Read from the source,
so no torch is imported.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[2]
SOURCES: Final = (ROOT / "xnnfold", ROOT / "benchmarks")
PARTITIONER: Final = "XnnpackFoldingPartitioner"
FALLBACK: Final = "facts_for_new_partitioner"


def _called(node: ast.Call) -> str:
    func = node.func
    return (
        func.id
        if isinstance(func, ast.Name)
        else func.attr
        if isinstance(func, ast.Attribute)
        else ""
    )


def _calls(name: str) -> dict[str, ast.Call]:
    """Every call of ``name`` in the package and the benchmarks, by "path:line"."""
    found = {}
    for folder in SOURCES:
        for path in sorted(folder.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call) and _called(node) == name:
                    found[f"{path.relative_to(ROOT).as_posix()}:{node.lineno}"] = node
    return found


def test_every_partitioner_xnnfold_builds_is_given_its_facts() -> None:
    calls = _calls(PARTITIONER)
    assert len(calls) > 5, "the scan found no partitioner built: it reads nothing"
    without = [
        where for where, call in calls.items() if "facts" not in {k.arg for k in call.keywords}
    ]
    assert without == []


def test_only_a_partitioner_built_without_facts_takes_the_fallback() -> None:
    callers = {where.rpartition(":")[0] for where in _calls(FALLBACK)}
    assert callers == {"xnnfold/passes/partition/_partitioner.py"}
