"""Each stage imports only what it runs on: marking torch, the codemod libcst, the keys nothing.

Checked in a fresh interpreter per module, since this process has imported everything.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Final

import pytest

# module -> top-level packages importing it must not load
BOUNDARIES: dict[str, tuple[str, ...]] = {
    "xnnfold._meta": ("torch", "executorch", "libcst"),
    "xnnfold._exit_codes": ("torch", "executorch", "libcst"),
    "xnnfold._code_registry": ("torch", "executorch", "libcst"),
    "xnnfold.rewriter.codemod._finding_codes": ("torch", "executorch", "libcst"),
    "xnnfold.rewriter._marking": ("executorch", "libcst"),
    "xnnfold.rewriter.codemod._api": ("torch", "executorch", "libcst"),
    "xnnfold.rewriter.codemod._names": ("torch", "executorch", "libcst"),
    "xnnfold.rewriter.codemod._rules": ("torch", "executorch"),
    "xnnfold.rewriter.codemod._driver": ("torch", "executorch", "libcst"),
    "xnnfold.rewriter.codemod._file_walk": ("torch", "executorch", "libcst"),
    "xnnfold.rewriter.codemod._report": ("torch", "executorch", "libcst"),
    "xnnfold.rewriter.codemod._command": ("torch", "executorch"),
    "xnnfold.cli": ("torch", "executorch", "libcst"),
    # transformers' exporter (seconds to import) is imported when `export` is called
    "xnnfold.integrations": ("torch", "executorch", "libcst", "transformers"),
    "xnnfold.integrations.transformers": ("torch", "executorch", "libcst", "transformers"),
}

_PROBE = """
import importlib, sys
importlib.import_module(sys.argv[1])
loaded = sorted({name.split(".")[0] for name in sys.modules} & set(sys.argv[2:]))
print(",".join(loaded))
"""


# Modules whose import raises (naming the extra) where this optional package is missing:
# there, the ImportError test in tests/integrations checks them instead.
NEEDS: Final = {"xnnfold.integrations.transformers": "transformers"}


@pytest.mark.parametrize("module", BOUNDARIES)
def test_importing_a_stage_loads_only_its_dependencies(module: str) -> None:
    if module in NEEDS:
        pytest.importorskip(NEEDS[module])
    forbidden = BOUNDARIES[module]
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, module, *forbidden],
        capture_output=True,
        text=True,
        check=True,
    )
    loaded = result.stdout.strip()
    assert loaded == "", f"importing {module} loaded {loaded}"


def test_marking_does_load_torch() -> None:
    """The probe sees imports at all: marking cannot work without torch."""
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, "xnnfold.rewriter._marking", "torch"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.strip() == "torch"
