"""PEP 562 lazy attributes, so that the codemod (libcst only) never imports torch.

`xnnfold` and `xnnfold.rewriter` export names whose modules import torch and executorch
(seconds of start-up); each is imported on first access instead.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any, Callable, Final, MutableMapping

__all__ = ["LOWERING_EXTRA_HINT", "lazy_attributes", "missing_lowering_package"]

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


def lazy_attributes(
    package: str, table: dict[str, str], namespace: MutableMapping[str, Any]
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
