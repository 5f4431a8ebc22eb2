"""PEP 562 lazy attributes, so that the codemod (libcst only) never imports torch.

`xnnfold` and `xnnfold.rewriter` export names whose modules import torch and executorch
(seconds of start-up); each is imported on first access instead.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any, Callable, Final, MutableMapping

__all__ = ["lazy_attributes"]

# What the codemod-only install (``pip install xnnfold``) leaves out.
LOWERING_STACK: Final[frozenset[str]] = frozenset({"torch", "executorch", "torchao"})
LOWERING_EXTRA_HINT: Final = (
    "install the lowering stack with: pip install torch==2.13.0 'xnnfold[xnnpack]' "
    "(or install torch and executorch yourself: see the README's supported versions)"
)


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
                if error.name is None or error.name.split(".")[0] not in LOWERING_STACK:
                    raise
                raise ModuleNotFoundError(
                    f"{package}.{name} needs {error.name.split('.')[0]}, which is not "
                    f"installed (only the codemod works without it); {LOWERING_EXTRA_HINT}",
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
