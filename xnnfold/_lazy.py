"""PEP 562 lazy attributes, so that the codemod (libcst only) never imports torch.

`xnnfold`, `xnnfold.rewriter` and `xnnfold.rewriter.codemod` export names whose modules
import torch, executorch or libcst (seconds of start-up); each is imported on first access
instead. A lazy package names each public name once, in its ``if TYPE_CHECKING:`` block,
importing it from the module that defines it: type checkers read that block, and
`lazy_exports` reads the same block as the table of where each name lives.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Callable, Final, MutableMapping

__all__ = [
    "LOWERING_EXTRA_HINT",
    "imports_under_type_checking",
    "lazy_attributes",
    "lazy_exports",
    "missing_lowering_package",
]

# What the codemod-only install (``pip install xnnfold``) leaves out.
LOWERING_STACK: Final[frozenset[str]] = frozenset({"torch", "executorch", "torchao"})
LOWERING_EXTRA_HINT: Final = (
    "install the lowering stack with: pip install torch==2.13.0 'xnnfold[xnnpack]' "
    "(or install torch and executorch yourself: see the README's supported versions)"
)


def missing_lowering_package(error: ModuleNotFoundError) -> str | None:
    """The lowering-stack package whose absence ``error`` reports, or None.

    None too when that package is installed and only a submodule is missing (a torch
    release without it): that is a version problem, not the codemod-only install."""
    top = (error.name or "").split(".")[0]
    if top not in LOWERING_STACK:
        return None
    try:
        installed = importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        installed = False
    return None if installed else top


def lazy_exports(
    package: str, init_file: str, namespace: MutableMapping[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``, whose ``__init__.py`` is
    ``init_file``: each name its ``if TYPE_CHECKING:`` block imports is imported from
    that module on first access. The block is read from the source when a lazy name is
    first asked for, so importing the package costs no parse."""
    return lazy_attributes(package, _TypeCheckingImports(Path(init_file)), namespace)


def imports_under_type_checking(source: str) -> dict[str, str]:
    """Name -> module of each ``from module import name`` under a top-level
    ``if TYPE_CHECKING:`` of ``source``."""
    import ast  # only when a lazy name is first asked for

    table: dict[str, str] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for item in node.body:
                if isinstance(item, ast.ImportFrom) and item.module and not item.level:
                    table.update((alias.asname or alias.name, item.module) for alias in item.names)
    return table


class _TypeCheckingImports(Mapping[str, str]):
    """`imports_under_type_checking` of a file, read on first use."""

    def __init__(self, path: Path) -> None:
        self._path = path

    @functools.cached_property
    def _table(self) -> dict[str, str]:
        return imports_under_type_checking(self._path.read_text(encoding="utf-8"))

    def __getitem__(self, name: str) -> str:
        return self._table[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._table)

    def __len__(self) -> int:
        return len(self._table)


def lazy_attributes(
    package: str, table: Mapping[str, str], namespace: MutableMapping[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``: ``table`` maps each public name to
    the module defining it; resolved values are cached in the package's ``namespace``."""

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is not None:
            try:
                imported = importlib.import_module(module)
            except ModuleNotFoundError as error:
                missing = missing_lowering_package(error)
                if missing is None:
                    raise
                raise ModuleNotFoundError(
                    f"{package}.{name} needs {missing}, which is not installed (only the "
                    f"codemod works without it); {LOWERING_EXTRA_HINT}",
                    name=error.name,
                ) from error
            value = getattr(imported, name)
            namespace[name] = value  # later lookups skip this hook
            return value
        # ``import xnnfold; xnnfold.passes`` worked when everything was imported eagerly.
        if not name.startswith("__") and importlib.util.find_spec(f"{package}.{name}") is not None:
            return importlib.import_module(f"{package}.{name}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted({*namespace, *table})

    return __getattr__, __dir__
