"""Each meaning of the package is written once, read from the source (no torch imported).

What was written several times, and now has one home:

- the lookup of a constant's tensor by its state_dict / constants key (`constant_tensor`,
  `passes/analysis/_nodes.py`);
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[2]
PACKAGE: Final = ROOT / "xnnfold"


def _trees() -> dict[str, ast.Module]:
    return {
        path.relative_to(PACKAGE).as_posix(): ast.parse(path.read_text())
        for path in sorted(PACKAGE.rglob("*.py"))
    }


def _reads_of(tree: ast.AST, attribute: str) -> int:
    """How often ``tree`` calls ``<anything>.<attribute>.get(...)``."""
    return sum(
        1
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and isinstance(node.func.value, ast.Attribute)
        and node.func.value.attr == attribute
    )


def test_a_constants_tensor_is_looked_up_in_one_place() -> None:
    readers = {
        path
        for path, tree in _trees().items()
        if _reads_of(tree, "state_dict") or _reads_of(tree, "constants")
    }
    assert readers == {"passes/analysis/_nodes.py"}
