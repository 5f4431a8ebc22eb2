"""``xnnfold``, ``xnnfold.rewriter`` and its codemod import their public names lazily (PEP 562).

The problem: both packages imported torch and executorch eagerly, so every ``xnnfold
codemod`` run (libcst only) and ``xnnfold --help`` paid seconds of imports. The fix resolves
each public name on first access. These tests pin both halves: every name in ``__all__``
still imports, and the codemod command lines never load torch or executorch.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import xnnfold
import xnnfold.rewriter
from xnnfold._lazy import imports_under_type_checking

_HEAVY = ("torch", "executorch")
_LEGACY_MODEL = b"""import torch
from torch.nn.utils import weight_norm


def build() -> torch.nn.Module:
    return weight_norm(torch.nn.Linear(4, 4))
"""


@pytest.mark.parametrize(
    "package, name",
    [("xnnfold", n) for n in xnnfold.__all__]
    + [("xnnfold.rewriter", n) for n in xnnfold.rewriter.__all__],
)
def test_public_name_imports(package: str, name: str) -> None:
    namespace: dict[str, object] = {}
    exec(f"from {package} import {name}", namespace)
    assert namespace[name] is getattr(importlib.import_module(package), name)


def test_unknown_attribute_raises_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        xnnfold.no_such_name  # noqa: B018


def test_submodule_reachable_as_attribute() -> None:
    assert xnnfold.passes is importlib.import_module("xnnfold.passes")


_PROBE = """
import atexit, runpy, sys
atexit.register(lambda: print("MODULES", *sorted(sys.modules), file=sys.__stderr__, flush=True))
sys.argv = ["xnnfold", *sys.argv[1:]]
runpy.run_module("xnnfold", run_name="__main__", alter_sys=True)
"""


def _imported_modules(
    args: list[str], cwd: Path
) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run ``python -m xnnfold ARGS``; its result and every module loaded when it exits."""
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )
    lines = [line for line in result.stderr.splitlines() if line.startswith("MODULES ")]
    assert len(lines) == 1, result.stderr[-2000:]
    return result, set(lines[0].split()[1:])


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in _HEAVY)


@pytest.mark.parametrize("args", [["--help"], ["codemod", "--help"]], ids=["xnnfold", "codemod"])
def test_help_does_not_import_torch(args: list[str], tmp_path: Path) -> None:
    result, modules = _imported_modules(args, tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "xnnfold.cli" in modules  # the probe sees the package's own imports
    assert _heavy(modules) == []


@pytest.mark.parametrize("mode", [[], ["--report"], ["--check"]], ids=["write", "report", "check"])
def test_codemod_run_does_not_import_torch(mode: list[str], tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "model.py").write_bytes(_LEGACY_MODEL)
    (tree / "plain.py").write_bytes(b"def f(x):\n    return x + 1\n")
    result, modules = _imported_modules(["codemod", *mode, str(tree)], tmp_path)
    assert result.returncode == (1 if mode == ["--check"] else 0), result.stderr[-2000:]
    assert "xnnfold.rewriter.codemod._rules" in modules  # the rules really ran
    assert _heavy(modules) == []
    rewritten = (tree / "model.py").read_bytes()
    if mode:
        assert rewritten == _LEGACY_MODEL
    else:
        assert b"from torch.nn.utils.parametrizations import weight_norm" in rewritten


_WITHOUT_TORCH = """
import importlib.abc, sys

class NoTorch(importlib.abc.MetaPathFinder):
    # As in the codemod-only install: torch and executorch are not there.
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "executorch"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoTorch())
"""

_LOWERING_NAME = """
import xnnfold
try:
    xnnfold.prepare_for_xnnpack
except ModuleNotFoundError as error:
    print("NAME", error.name)
    print("MESSAGE", error)
"""

_DEMO_COMMAND = """
from xnnfold.cli import main
print("EXIT", main(["demo"]))
"""


def test_a_lowering_name_without_torch_says_which_install_it_needs(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", _WITHOUT_TORCH + _LOWERING_NAME],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "NAME torch" in result.stdout
    assert "prepare_for_xnnpack needs torch, which is not installed" in result.stdout
    assert "'xnnfold[xnnpack]'" in result.stdout


def test_a_lowering_command_without_torch_says_which_install_it_needs(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", _WITHOUT_TORCH + _DEMO_COMMAND],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert "EXIT 2" in result.stdout, result.stderr[-2000:]
    assert "xnnfold demo: needs torch, which is not installed" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_missing_module_of_the_users_own_is_not_reworded() -> None:
    from xnnfold._lazy import lazy_attributes

    getattr_, _ = lazy_attributes("pkg", {"thing": "no_such_module_of_yours"}, {})
    with pytest.raises(ModuleNotFoundError, match="No module named 'no_such_module_of_yours'"):
        getattr_("thing")


LAZY_PACKAGES = ["xnnfold", "xnnfold.rewriter", "xnnfold.rewriter.codemod"]


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_the_type_checking_imports_are_the_public_names(package: str) -> None:
    """Each lazy package names its public API in its TYPE_CHECKING block (for type
    checkers, and the table `lazy_exports` loads from) and in ``__all__``: the same names."""
    module = importlib.import_module(package)
    assert module.__file__ is not None
    typed = imports_under_type_checking(Path(module.__file__).read_text())
    assert sorted(typed) == sorted(module.__all__)
    assert all(
        getattr(module, name) is getattr(importlib.import_module(typed[name]), name)
        for name in typed
    )


def test_the_table_is_what_the_type_checking_block_imports() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "import os\n"
        "if TYPE_CHECKING:\n"
        "    from a.b import c, d as e\n"
        "    from . import relative\n"
        "    import f\n"
        "from g import h\n"
    )
    assert imports_under_type_checking(source) == {"c": "a.b", "e": "a.b"}


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_no_lazy_package_writes_a_table_of_its_own(package: str) -> None:
    """The TYPE_CHECKING block is the one table: no second one beside it."""
    module = importlib.import_module(package)
    assert module.__file__ is not None
    source = Path(module.__file__).read_text()
    assert "_LAZY" not in source
    assert "lazy_exports(__name__, __file__, globals())" in source
