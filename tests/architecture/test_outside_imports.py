"""Nothing outside the package and its tests leans on either's insides.

The benchmarks, the sweeps and the correctness tools (every ``*.py`` outside `xnnfold/`
and `tests/`, at any depth) use xnnfold as a user does: no private module or name of
`xnnfold` (a path component or an imported name starting with ``_``, or an attribute
``xnnfold._x`` reached from an imported module) and no module of `tests`, but the
support package `tests.support`, which holds no tests and is meant to be shared (the
differential oracles and the program grammar that `benchmarks/correctness/` runs at
scale). A private name renamed in the package then breaks no script that nothing tests.

Read from the source (every import statement, under ``TYPE_CHECKING`` and inside
functions too), so nothing is imported.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

ROOT: Final = Path(__file__).resolve().parents[2]
# What the scan never enters: the package and its tests (which may use privates), and
# directories no source of the project lives in.
INSIDE: Final = frozenset({"xnnfold", "tests"})
SKIPPED_DIRECTORIES: Final = frozenset({"build", "dist", "node_modules", "venv"})
SHARED_TEST_SUPPORT: Final = "tests.support"


def _outside_files(root: Path) -> list[Path]:
    """Every ``*.py`` below ``root`` but in `INSIDE`, hidden or skipped directories."""
    found = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).parts
        if parts[0] in INSIDE or any(
            p.startswith(".") or p in SKIPPED_DIRECTORIES or p.endswith(".egg-info")
            for p in parts[:-1]
        ):
            continue
        found.append(path)
    return found


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _private_xnnfold(module: str) -> bool:
    parts = module.split(".")
    return parts[0] == "xnnfold" and any(_is_private(p) for p in parts)


def _from_tests(module: str) -> bool:
    parts = module.split(".")
    return (
        parts[0] == "tests"
        and module != SHARED_TEST_SUPPORT
        and not (module.startswith(SHARED_TEST_SUPPORT + "."))
    )


def _attribute_chain(node: ast.Attribute) -> list[str]:
    chain = [node.attr]
    value = node.value
    while isinstance(value, ast.Attribute):
        chain.append(value.attr)
        value = value.value
    if isinstance(value, ast.Name):
        chain.append(value.id)
    return chain[::-1]


def violations(source: str) -> Iterator[str]:
    """Each import or attribute of ``source`` that reaches an xnnfold private or a
    module of `tests`, as ``line: what``."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _private_xnnfold(alias.name) or _from_tests(alias.name):
                    yield f"{node.lineno}: import {alias.name}"
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            module = node.module
            if _private_xnnfold(module) or _from_tests(module):
                yield f"{node.lineno}: from {module} import ..."
            elif module.split(".")[0] in ("xnnfold", "tests"):
                for alias in node.names:
                    full = f"{module}.{alias.name}"
                    if _is_private(alias.name) or _from_tests(full):
                        yield f"{node.lineno}: from {module} import {alias.name}"
        elif isinstance(node, ast.Attribute):
            chain = _attribute_chain(node)
            if chain[0] == "xnnfold" and _private_xnnfold(".".join(chain)):
                yield f"{node.lineno}: {'.'.join(chain)}"


def test_no_file_outside_the_package_uses_its_privates_or_the_tests() -> None:
    found = {
        str(path.relative_to(ROOT)): sorted(set(violations(path.read_text())))
        for path in _outside_files(ROOT)
    }
    found = {path: lines for path, lines in found.items() if lines}
    assert not found, (
        "use xnnfold's public API (or give the name a public home in the package) and "
        f"tests.support rather than a test module: {found}"
    )


def test_the_scan_reaches_every_benchmark_at_any_depth() -> None:
    scanned = {path.relative_to(ROOT) for path in _outside_files(ROOT)}
    benchmarks = {p.relative_to(ROOT) for p in (ROOT / "benchmarks").rglob("*.py")}
    assert benchmarks and benchmarks <= scanned
    assert any(len(p.parts) > 2 for p in scanned), "no nested benchmark file scanned"
    assert not any(p.parts[0] in INSIDE for p in scanned)


@pytest.mark.parametrize(
    "source",
    [
        "from xnnfold._releases import installed_version",
        "import xnnfold.passes._options",
        "from xnnfold.passes.analysis import _growth",
        "from xnnfold.cli import _demo as demo",
        "def f():\n    from xnnfold.rewriter.codemod._driver import run_codemod",
        "import xnnfold\nxnnfold._upstream.tree_leaves",
        "from tests.end_to_end.test_differential import check_program",
        "import tests.conftest",
        "from tests import conftest",
    ],
)
def test_a_private_or_a_test_module_is_found(source: str) -> None:
    assert list(violations(source)), source


@pytest.mark.parametrize(
    "source",
    [
        "import xnnfold",
        "from xnnfold import __version__, XnnpackFoldingPartitioner",
        "from xnnfold.passes.analysis import growth_of",
        "from xnnfold.fixtures import compare_fixture",
        "from tests.support.differential import check_program",
        "from tests.support import reproducers",
        "import xnnfold\nxnnfold.fixtures.FIXTURES",
        "from sweeps._engine import run",
    ],
)
def test_a_public_name_passes(source: str) -> None:
    assert not list(violations(source)), source
