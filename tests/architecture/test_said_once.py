"""Each meaning of the package is written once, read from the source (no torch imported).

What was written several times, and now has one home:

- the registry of stable codes, both families (`xnnfold/_code_registry.py`);
- the lookup of a constant's tensor by its state_dict / constants key (`constant_tensor`,
  `passes/analysis/_nodes.py`);
- the GEMMs XNNPACK serializes as a fully-connected op, and where each GEMM takes its
  weight and bias (`passes/_ops.py`);
- the name of the logger the partitioner warns on (`PARTITIONER_LOGGER`,
  `passes/partition/_outcome.py`).
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


# The GEMMs by ATen op name; a table written anywhere else names them as strings
# ("linear") or as ops (``aten.linear.default``, ``edge.linear.default``).
_GEMM_NAMES: Final = frozenset({"convolution", "linear", "addmm", "mm", "matmul", "bmm"})
_FULLY_CONNECTED: Final = frozenset({"linear", "addmm", "mm"})
_OPS_TABLES: Final = "passes/_ops.py"


def _gemm_named(node: ast.AST) -> str | None:
    """The GEMM ``node`` names: a string, or the packet of an op (``aten.mm.default``)."""
    if isinstance(node, ast.Constant) and node.value in _GEMM_NAMES:
        return str(node.value)
    if isinstance(node, ast.Attribute):
        packet = node.value if node.attr == "default" else node
        if isinstance(packet, ast.Attribute) and packet.attr in _GEMM_NAMES:
            return packet.attr
    return None


def _positions(node: ast.AST) -> bool:
    """Whether ``node`` is an argument position or a tuple of them."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int) and not isinstance(node.value, bool)
    return isinstance(node, ast.Tuple) and all(_positions(e) for e in node.elts)


def _tables(tree: ast.AST) -> tuple[list[set[str]], list[set[str]]]:
    """The op sets (set literals) and the position tables (dicts of positions) of
    ``tree``, each as the GEMMs it names."""
    sets: list[set[str]] = []
    positions: list[set[str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Set):
            sets.append({n for e in node.elts if (n := _gemm_named(e))})
        elif isinstance(node, ast.Dict):
            named = {n for k in node.keys if k is not None and (n := _gemm_named(k))}
            if len(named) > 1 and all(_positions(v) for v in node.values):
                positions.append(named)
    return sets, positions


def test_the_fully_connected_gemms_are_named_in_one_place() -> None:
    holders = {
        path
        for path, tree in _trees().items()
        if any(found >= _FULLY_CONNECTED for found in _tables(tree)[0])
    }
    assert holders == {_OPS_TABLES}


def test_no_config_class_restates_that_its_gemm_is_fully_connected() -> None:
    restated = [
        path
        for path, tree in _trees().items()
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
        for item in node.body
        if isinstance(item, (ast.Assign, ast.AnnAssign))
        and "fully_connected"
        in [
            t.id
            for t in (item.targets if isinstance(item, ast.Assign) else [item.target])
            if isinstance(t, ast.Name)
        ]
    ]
    assert restated == []


def test_the_gemm_argument_positions_are_written_in_one_place() -> None:
    holders = {path for path, tree in _trees().items() if _tables(tree)[1]}
    assert holders == {_OPS_TABLES}


def test_the_partitioners_logger_is_named_once() -> None:
    name = "xnnfold.passes.partition._partitioner"
    written = [
        path
        for path, tree in _trees().items()
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value == name
    ]
    assert written == ["passes/partition/_outcome.py"]


def _code_classes(tree: ast.AST) -> list[str]:
    """Classes of ``tree`` whose fields are a code's: ``code``, ``name``, ``summary``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            fields = {
                item.target.id
                for item in node.body
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
            }
            if {"code", "name", "summary"} <= fields:
                found.append(node.name)
    return found


def _code_tables(tree: ast.Module) -> list[str]:
    """Module-level names of ``tree`` bound to an empty dict (a table that registering
    fills) and named like a code table."""
    found = []
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        value = getattr(node, "value", None)
        if (
            isinstance(target, ast.Name)
            and "CODES" in target.id
            and (
                (isinstance(value, ast.Dict) and not value.keys)
                or (
                    isinstance(value, ast.Call)
                    and getattr(value.func, "id", None) == "dict"
                    and not (value.args or value.keywords)
                )
            )
        ):
            found.append(target.id)
    return found


def test_the_codes_have_one_registry() -> None:
    trees = _trees()
    classes = {path: found for path, tree in trees.items() if (found := _code_classes(tree))}
    tables = {path: found for path, tree in trees.items() if (found := _code_tables(tree))}
    assert classes == {"_code_registry.py": ["ReasonCode"]}
    assert tables == {"_code_registry.py": ["_CODES"]}
