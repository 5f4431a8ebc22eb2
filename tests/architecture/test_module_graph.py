"""Rules read from the source of the whole package (nothing imported, so no torch):

- no module of `xnnfold` imports, directly or through others, a module that imports it back
  (every import statement counts: under ``TYPE_CHECKING`` and inside functions too);
- the seam (`_upstream`) imports the release policy (`_releases`), which reaches the seam
  through no import: the policy changes with every release, the seam only when upstream
  moves a name;
- no module keeps state in a context variable or a thread-local but the places listed
  here, each with why it must;
- the shared analysis reads from node metadata only what torch, executorch and the
  marking write there, and writes none: whatever a stage decided reaches the analysis as
  an argument (`decide`'s ``kept``, ``facts``, ``decisions``);
- only the shared analysis calls the predicate (`find_weight_computation`): the stages
  ask the decision ladder (`decide`);
- each of xnnfold's own marks on node.meta has one writer, and partitioning reads back
  none of the marks it writes (what it needs afterwards comes from its findings);
- the edge matching does not stand on the ATen planner;
- a module holds one concern and a function one decision: none over 400 and 80 lines,
  but those listed.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Final, Optional

ROOT: Final = Path(__file__).resolve().parents[2]
PACKAGE: Final = ROOT / "xnnfold"


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


# The one place each kind of ambient state is allowed, and why (docs/architecture.md,
# "Process state").
# None: the analysis caches are handed down as arguments (`AnalysisCache`).
CONTEXT_VARIABLES: Final[frozenset[str]] = frozenset()
THREAD_LOCALS: Final = {
    # The default cross-method facts of a partitioner built without `facts=`: the one
    # documented fallback for hand-built partitioners.
    "passes/partition/_facts.py",
}


def _trees() -> dict[str, ast.Module]:
    return {
        path.relative_to(PACKAGE).as_posix(): ast.parse(path.read_text())
        for path in sorted(PACKAGE.rglob("*.py"))
    }


def _uses(tree: ast.AST, module: str, name: str) -> bool:
    """Whether ``tree`` imports ``name`` from ``module`` or reads ``<module>.<name>``."""
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module == module
            and any(a.name == name for a in node.names)
        ):
            return True
        if (
            isinstance(node, ast.Attribute)
            and node.attr == name
            and isinstance(node.value, ast.Name)
            and node.value.id == module
        ):
            return True
    return False


def test_context_variables_are_only_in_the_listed_place() -> None:
    holders = {p for p, tree in _trees().items() if _uses(tree, "contextvars", "ContextVar")}
    assert holders == CONTEXT_VARIABLES


def test_thread_locals_are_only_in_the_listed_places() -> None:
    holders = {p for p, tree in _trees().items() if _uses(tree, "threading", "local")}
    assert holders == THREAD_LOCALS


def test_the_state_scan_finds_what_it_looks_for() -> None:
    assert _uses(ast.parse("import threading\nclass A(threading.local): ..."), "threading", "local")
    assert _uses(ast.parse("from threading import local"), "threading", "local")
    assert _uses(ast.parse("from contextvars import ContextVar"), "contextvars", "ContextVar")
    assert not _uses(ast.parse("import threading\nthreading.Lock()"), "threading", "local")


# What the analysis may read from node metadata, each written by someone else than a stage
# of xnnfold: torch's value of a node (its shape and dtype), executorch's partition and
# external-data tags, and the site mark `prepare_for_xnnpack` leaves through torch.export
# (inside the "custom" dict, the one torch and the decompositions carry over).
ANALYSIS_MAY_READ: Final = frozenset(
    {
        "VAL_META_KEY",
        "DELEGATION_TAG_META_KEY",
        "EXTERNAL_TAG_KEYS",
        "CUSTOM_META_KEY",
        "SITE_META_KEY",
    }
)
_META_WRITES: Final = frozenset({"update", "pop", "setdefault", "clear", "popitem"})


def _meta_keys_of_xnnfold() -> dict[str, str]:
    """The keys `xnnfold/_meta.py` defines for its own marks, value -> constant name."""
    found = {}
    for node in ast.parse((PACKAGE / "_meta.py").read_text()).body:
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
            and node.value.value.startswith("xnnfold_")
        ):
            found[node.value.value] = node.target.id
    return found


def _analysis_trees() -> dict[str, ast.Module]:
    return {p: tree for p, tree in _trees().items() if p.startswith("passes/analysis/")}


def test_the_analysis_reads_only_metadata_others_write() -> None:
    imported = {
        alias.name
        for tree in _analysis_trees().values()
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "xnnfold._meta"
        for alias in node.names
    }
    assert imported, "the analysis imports no metadata key: the scan reads nothing"
    assert imported <= ANALYSIS_MAY_READ
    # Nor by spelling a key out: xnnfold's own marks (the fold marks, the reasons, the
    # decomposition filter's mark) never appear in the analysis, the site mark's key aside.
    own = _meta_keys_of_xnnfold()
    assert "xnnfold_preserved" in own
    spelled = {
        f"{path}:{node.lineno} {node.value!r}"
        for path, tree in _analysis_trees().items()
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and node.value in own
        and own[node.value] not in ANALYSIS_MAY_READ
    }
    assert spelled == set()


def _meta_key(node: ast.Attribute, parents: dict[ast.AST, ast.AST]) -> ast.AST | None:
    """The key read from ``node`` (a ``.meta``): ``meta[key]`` or ``meta.get(key)``."""
    parent = parents.get(node)
    if isinstance(parent, ast.Subscript):
        return parent.slice
    if isinstance(parent, ast.Attribute) and parent.attr == "get":
        call = parents.get(parent)
        if isinstance(call, ast.Call) and call.args:
            return call.args[0]
    return None


def test_the_analysis_reads_metadata_by_its_named_keys_and_writes_none() -> None:
    """Every key the analysis reads from ``node.meta`` is a name (one of the keys it may
    import, or the loop over executorch's external-data tags), never a string literal;
    and nothing in the analysis writes to ``node.meta``."""
    problems = []
    reads = 0
    for path, tree in _analysis_trees().items():
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and node.attr == "meta"):
                continue
            parent = parents.get(node)
            written = (isinstance(parent, ast.Attribute) and parent.attr in _META_WRITES) or (
                isinstance(parent, ast.Subscript) and isinstance(parent.ctx, ast.Store)
            )
            if written or isinstance(node.ctx, ast.Store):
                problems.append(f"{path}:{node.lineno} writes node.meta")
                continue
            key = _meta_key(node, parents)
            if isinstance(key, ast.Constant):
                problems.append(f"{path}:{node.lineno} reads node.meta[{key.value!r}]")
            reads += 1
    assert reads, "the analysis reads no metadata: the scan found nothing"
    assert problems == []


# xnnfold's own marks, each with its one writer (`xnnfold/_meta.py` lists them).
MARK_WRITERS: Final = {
    "FOLD_META_KEY": {"passes/partition/_outcome.py"},
    "REASON_META_KEY": {"passes/partition/_outcome.py"},
    "PRESERVED_META_KEY": {"passes/partition/_decompositions.py"},
}
# What reads a mark back: partitioning reads none of the marks it writes.
_MARK_READERS: Final = frozenset(
    {"fold_mark_of", "reason_of", "has_fold_marks", "tanh_gelu_mark_of"}
)


def _stores(tree: ast.AST, key: str) -> bool:
    """Whether ``tree`` assigns ``<something>[key] = ...``."""
    return any(
        isinstance(node, ast.Subscript)
        and isinstance(node.ctx, ast.Store)
        and isinstance(node.slice, ast.Name)
        and node.slice.id == key
        for node in ast.walk(tree)
    )


def test_each_mark_has_one_writer() -> None:
    trees = _trees()
    writers = {key: {p for p, tree in trees.items() if _stores(tree, key)} for key in MARK_WRITERS}
    assert writers == MARK_WRITERS


def test_partitioning_reads_back_none_of_the_marks_it_writes() -> None:
    """What partitioning needs after it matched (the hook, the reasons, the tied tables'
    reason) comes from its findings, never from a fold mark or a reason read back."""
    problems = []
    for path, tree in _trees().items():
        if not path.startswith("passes/partition/"):
            continue
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id in _MARK_READERS:
                problems.append(f"{path}:{node.lineno} {node.id}")
            if isinstance(node, ast.ImportFrom) and any(
                alias.name in _MARK_READERS for alias in node.names
            ):
                problems.append(f"{path}:{node.lineno} imports a reader")
            if isinstance(node, ast.Attribute) and node.attr == "meta":
                key = _meta_key(node, parents)
                if isinstance(key, ast.Name) and key.id in ("FOLD_META_KEY", "REASON_META_KEY"):
                    parent = parents.get(node)
                    if not (
                        isinstance(parent, ast.Subscript) and isinstance(parent.ctx, ast.Store)
                    ):
                        problems.append(f"{path}:{node.lineno} reads node.meta[{key.id}]")
    assert problems == []


def test_the_mark_scans_find_what_they_look_for() -> None:
    assert _stores(ast.parse("node.meta[FOLD_META_KEY] = mark"), "FOLD_META_KEY")
    assert not _stores(ast.parse("node.meta.pop(FOLD_META_KEY, None)"), "FOLD_META_KEY")
    tree = ast.parse("x = node.meta.get(REASON_META_KEY)")
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    (meta,) = [n for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "meta"]
    key = _meta_key(meta, parents)
    assert isinstance(key, ast.Name) and key.id == "REASON_META_KEY"


def test_the_edge_matching_does_not_stand_on_the_aten_plan() -> None:
    graph = _package_graph()
    plan = "xnnfold.passes.partition._aten_plan"
    for edge_stage in ("_matching", "_configs", "_folding_config"):
        assert plan not in _reachable(graph, f"xnnfold.passes.partition.{edge_stage}")


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


# Past these, a module or a function most likely holds two concerns (docs: CONTRIBUTING).
MAX_MODULE_LINES: Final = 400
MAX_FUNCTION_LINES: Final = 80
LONGER_MODULES: Final[frozenset[str]] = frozenset()
LONGER_FUNCTIONS: Final = {
    # One call of transformers' exporter with its arguments checked and its table swapped.
    "integrations/_transformers.py:export",
    # The user-facing assertion, its message built in place.
    "testing.py:assert_fully_delegated",
}


def test_no_module_is_longer_than_one_concern_takes() -> None:
    longer = {
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if len(path.read_text().splitlines()) > MAX_MODULE_LINES
    }
    assert longer == LONGER_MODULES


def test_no_function_is_longer_than_one_decision_takes() -> None:
    longer = set()
    for path, tree in _trees().items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                if (node.end_lineno or start) - start + 1 > MAX_FUNCTION_LINES:
                    longer.add(f"{path}:{node.name}")
    assert longer == LONGER_FUNCTIONS
