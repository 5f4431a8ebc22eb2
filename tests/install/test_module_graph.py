"""Rules read from the source of the whole package (nothing imported, so no torch):

- no module of `xnnfold` imports, directly or through others, a module that imports it back
  (every import statement counts: under ``TYPE_CHECKING`` and inside functions too);
- the seam (`_upstream`) imports the release policy (`_releases`), which reaches the seam
  through no import: the policy changes with every release, the seam only when upstream
  moves a name;
- the partition stage passes no state through a context variable, and through a
  thread-local only in the default holder of the cross-method facts (`_facts.py`);
- only the shared analysis calls the predicate (`find_weight_computation`): the stages
  ask the decision ladder (`decide`).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Final, Optional

ROOT: Final = Path(__file__).resolve().parents[2]
PACKAGE: Final = ROOT / "xnnfold"
PARTITION: Final = PACKAGE / "passes" / "partition"
ANALYSIS: Final = PACKAGE / "passes" / "analysis"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _imports(path: Path, known: set[str]) -> Iterator[str]:
    """The package's modules ``path`` imports (``from a import b`` names ``a.b`` when
    that is a module, else ``a``)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    yield alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                if f"{base}.{alias.name}" in known:
                    yield f"{base}.{alias.name}"
                elif base in known:
                    yield base


def find_cycle(graph: dict[str, set[str]]) -> Optional[list[str]]:
    """One cycle of ``graph`` (modules in import order, the first repeated last), or None."""
    state: dict[str, int] = {}
    for start in sorted(graph):
        if start in state:
            continue
        stack: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        path = [start]
        state[start] = 1
        while stack:
            node, targets = stack[-1]
            target = next(targets, None)
            if target is None:
                stack.pop()
                path.pop()
                state[node] = 2
            elif state.get(target) == 1:
                return [*path[path.index(target) :], target]
            elif target not in state:
                state[target] = 1
                path.append(target)
                stack.append((target, iter(sorted(graph.get(target, ())))))
    return None


def _package_graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        # A package's own submodules import it while it is partly initialised (its
        # __init__ re-exports them): that edge is Python's package mechanics, not a circle.
        graph[name] = {
            target
            for target in _imports(path, known)
            if target != name and not (path.name != "__init__.py" and name.startswith(f"{target}."))
        }
    return graph


def test_no_module_of_the_package_imports_itself_back() -> None:
    assert find_cycle(_package_graph()) is None


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """The modules ``start`` imports, directly or through others."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for target in graph.get(todo.pop(), ()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def test_the_seam_imports_the_release_policy_never_the_reverse() -> None:
    graph = _package_graph()
    assert "xnnfold._releases" in graph["xnnfold._upstream"]
    assert "xnnfold._upstream" not in _reachable(graph, "xnnfold._releases")


def test_find_cycle_finds_a_cycle_exactly_when_there_is_one() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def _sources(folder: Path) -> dict[Path, str]:
    return {path: path.read_text() for path in sorted(folder.rglob("*.py"))}


def test_the_partition_stage_has_no_context_variable() -> None:
    for path, text in _sources(PARTITION).items():
        assert "ContextVar" not in text, path


def test_only_the_facts_default_holder_is_a_thread_local() -> None:
    holders = [path.name for path, text in _sources(PARTITION).items() if "threading.local" in text]
    assert holders == ["_facts.py"]


def _calls(text: str, function: str) -> int:
    return sum(
        1
        for node in ast.walk(ast.parse(text))
        if isinstance(node, ast.Call)
        and (
            (isinstance(node.func, ast.Name) and node.func.id == function)
            or (isinstance(node.func, ast.Attribute) and node.func.attr == function)
        )
    )


def test_only_the_analysis_calls_the_predicate() -> None:
    callers = {
        path.relative_to(PACKAGE).as_posix()
        for path, text in _sources(PACKAGE).items()
        if _calls(text, "find_weight_computation")
    }
    assert callers, "the predicate is called nowhere: the rule reads nothing"
    assert all(path.startswith("passes/analysis/") for path in callers), callers
