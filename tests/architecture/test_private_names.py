"""A module's ``_``-prefixed names are its own: no module of `xnnfold` imports another
module's private name.

A helper that another module imports is part of its module's interface, so it carries a
public name, even inside a private module (``xnnfold/rewriter/codemod/_syntax.py``'s
`source_of`); the leading underscore then says "used here alone", which a reader can trust
when changing it. Importing a private module itself (``from xnnfold import _upstream``) is
the package's layout and is allowed; only names are checked. Read from the source (every
import statement, under ``TYPE_CHECKING`` and inside functions too).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[2]
PACKAGE: Final = ROOT / "xnnfold"
# Importer -> the private names it may import, each with why.
ALLOWED: Final = {
    # The export command prints the lines `assert_fully_delegated` fails with, word for
    # word; `xnnfold.testing` is public, and this helper is not part of its API.
    ("xnnfold/cli/_export.py", "xnnfold.testing._outside_lines"),
}


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _is_module(dotted: str) -> bool:
    path = ROOT.joinpath(*dotted.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def private_names_imported(source: str) -> list[str]:
    """``module.name`` for each private name (not a module) ``source`` imports from xnnfold."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] != "xnnfold":
                continue
            for alias in node.names:
                dotted = f"{node.module}.{alias.name}"
                if _is_private(alias.name) and not _is_module(dotted):
                    found.append(dotted)
    return found


def test_no_module_imports_another_modules_private_name() -> None:
    found = sorted(
        (str(path.relative_to(ROOT)), name)
        for path in sorted(PACKAGE.rglob("*.py"))
        for name in private_names_imported(path.read_text())
        if (str(path.relative_to(ROOT)), name) not in ALLOWED
    )
    assert not found, f"give each a public name in its module: {found}"


def test_a_private_name_is_found_and_a_private_module_is_not() -> None:
    source = (
        "from xnnfold.rewriter.codemod._syntax import _helper\n"
        "from xnnfold import _upstream\n"
        "from xnnfold.rewriter.codemod._syntax import source_of\n"
    )
    assert private_names_imported(source) == ["xnnfold.rewriter.codemod._syntax._helper"]
