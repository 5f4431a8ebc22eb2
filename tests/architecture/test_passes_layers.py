"""The packages of `xnnfold/passes` import one another in one direction only.

Read from the source (no module is imported, so no torch): every import statement of every
module, at any depth (also under ``TYPE_CHECKING`` and inside functions), names the unit it
reaches. A unit is a subpackage (`analysis`, `partition`, `fold`, `report`), a top-level
module (`_ops`, `_reason_codes`, `_options`, `_graph_walk`, `_marks`) or the facade (`xnnfold/passes/__init__.py`).

The allowed direction, top to bottom (a unit imports only units of lower layers):

    the facade    re-exports the public names of every stage
    partition     the partitioner; installs the fold hook, collects the report's reasons
    fold, report  the fold pass and its hook; reasons, `explain`, `summarize`
    analysis      the rules every stage shares: the predicate, argument rules, growth ledger
    _marks        the fold mark and the reason the partitioner leaves on a GEMM
    _options      `FoldOptions`
    _reason_codes, _graph_walk  reason codes; graph walks
    _ops          op sets and argument tables

So nothing imports `partition` back, `analysis` imports no stage, and a new unit must be
placed in `LAYERS` before it may import or be imported.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Final, Optional

import pytest

PASSES: Final = Path(__file__).resolve().parents[2] / "xnnfold" / "passes"
PACKAGE: Final = "xnnfold.passes"
FACADE: Final = "(facade)"

# Top to bottom; a unit may import only units of a later entry.
LAYERS: Final[tuple[tuple[str, ...], ...]] = (
    (FACADE,),
    ("partition",),
    ("fold", "report"),
    ("analysis", "_marks"),
    ("_options",),
    ("_reason_codes", "_graph_walk", "_node_arguments"),
    ("_ops",),
)
LAYER_OF: Final = {unit: depth for depth, units in enumerate(LAYERS) for unit in units}


def _units() -> set[str]:
    """Every unit on disk: the facade, each subpackage, each top-level module."""
    found = {FACADE}
    for path in PASSES.iterdir():
        if path.is_dir() and (path / "__init__.py").is_file():
            found.add(path.name)
        elif path.suffix == ".py" and path.name != "__init__.py":
            found.add(path.stem)
    return found


def _unit_of(path: Path) -> str:
    parts = path.relative_to(PASSES).parts
    if parts == ("__init__.py",):
        return FACADE
    return parts[0] if len(parts) > 1 else Path(parts[0]).stem


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PASSES).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([PACKAGE, *parts])


def _imported_modules(text: str, module: str, *, is_package: bool) -> Iterator[str]:
    """The absolute name of each module (or module attribute) that the source ``text`` of
    ``module`` imports."""
    own = module.split(".")
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = own if is_package else own[:-1]
                base = base[: len(base) - (node.level - 1)]
                name = ".".join([*base, *([node.module] if node.module else [])])
            else:
                name = node.module or ""
            # `from xnnfold.passes import fold` reaches the subpackage, not the facade.
            yield from (f"{name}.{alias.name}" for alias in node.names)


def _target_unit(name: str, units: set[str]) -> Optional[str]:
    """The unit of ``xnnfold.passes`` that importing ``name`` runs, or None (outside)."""
    if name != PACKAGE and not name.startswith(PACKAGE + "."):
        return None
    rest = name[len(PACKAGE) + 1 :].split(".") if name != PACKAGE else []
    if rest and rest[0] in units:
        return rest[0]
    return FACADE


def import_graph(root: Path = PASSES) -> dict[str, set[str]]:
    """unit -> the other units its modules import."""
    units = _units()
    graph: dict[str, set[str]] = {unit: set() for unit in units}
    for path in sorted(root.rglob("*.py")):
        source = _unit_of(path)
        text = path.read_text(encoding="utf-8")
        module = _module_name(path)
        for name in _imported_modules(text, module, is_package=path.name == "__init__.py"):
            target = _target_unit(name, units)
            if target is not None and target != source:
                graph[source].add(target)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> Optional[list[str]]:
    """One cycle of ``graph`` as [a, b, ..., a], or None when it has none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(unit: str) -> Optional[list[str]]:
        state[unit] = 1
        path.append(unit)
        for nxt in sorted(graph.get(unit, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle is not None:
                    return cycle
        path.pop()
        state[unit] = 2
        return None

    for unit in sorted(graph):
        if unit not in state:
            cycle = visit(unit)
            if cycle is not None:
                return cycle
    return None


def test_the_packages_of_passes_import_each_other_without_a_cycle() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, (
        f"xnnfold/passes has an import cycle: {' -> '.join(cycle or [])}; "
        "move what both sides need down into a lower layer (see this file's docstring)"
    )


def test_every_import_between_the_packages_of_passes_goes_down_the_layers() -> None:
    graph = import_graph()
    unplaced = sorted(set(graph) - set(LAYER_OF))
    assert not unplaced, f"xnnfold/passes has units not placed in LAYERS: {unplaced}"
    upward = sorted(
        f"{source} -> {target}"
        for source, targets in graph.items()
        for target in targets
        if LAYER_OF[target] <= LAYER_OF[source]
    )
    assert not upward, (
        f"imports against the layering of xnnfold/passes: {upward}; a unit imports only "
        "units of lower layers (LAYERS, top to bottom)"
    )


def test_the_graph_sees_the_imports_the_stages_make() -> None:
    """The scan is not vacuous: the edges every stage is built on are found."""
    graph = import_graph()
    assert {"analysis", "fold", "report"} <= graph["partition"]
    assert "analysis" in graph["fold"] and "analysis" in graph["report"]
    assert graph["analysis"] >= {"_ops", "_reason_codes", "_options", "_graph_walk"}
    assert "partition" not in graph["fold"] | graph["report"] | graph["analysis"]


@pytest.mark.parametrize(
    ("graph", "cycle"),
    [
        ({"a": {"b"}, "b": {"c"}, "c": set()}, None),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
        ({"a": {"b", "c"}, "b": set(), "c": {"c2"}, "c2": {"c"}}, ["c", "c2", "c"]),
    ],
)
def test_find_cycle_finds_a_cycle_exactly_when_there_is_one(
    graph: dict[str, set[str]], cycle: Optional[list[str]]
) -> None:
    assert find_cycle(graph) == cycle


def test_relative_and_facade_imports_name_the_unit_they_run() -> None:
    source = (
        "from . import _pass\n"
        "from .. import analysis\n"
        "from ..partition._configs import x\n"
        "from xnnfold.passes import FoldOptions\n"
        "import xnnfold.passes.report._reasons\n"
        "import torch\n"
    )
    names = _imported_modules(source, "xnnfold.passes.fold._probe", is_package=False)
    units = _units()
    assert [_target_unit(name, units) for name in names] == [
        "fold",
        "analysis",
        "partition",
        FACADE,
        "report",
        None,
    ]
