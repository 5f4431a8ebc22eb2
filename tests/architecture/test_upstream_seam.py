"""The one seam: every private executorch, torch, torchao, transformers and libcst name is
reached in `_upstream`: imported there (`INTERNALS`), or read and written there by an
accessor."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path
from typing import Iterator

import pytest

from xnnfold import _upstream
from xnnfold._releases import UnsupportedRelease
from xnnfold._upstream import INTERNALS, UPSTREAM_NAMES

PACKAGE = Path(_upstream.__file__).parent
_UPSTREAM_PACKAGES = ("executorch", "torch", "torchao", "libcst", "transformers")
# Packages only an optional integration reads: absent from some supported installs.
_OPTIONAL_PACKAGES = ("transformers",)


@pytest.mark.parametrize("name", INTERNALS)
def test_every_internal_imports_on_this_release(name: str) -> None:
    package = INTERNALS[name][0]
    if package in _OPTIONAL_PACKAGES and importlib.util.find_spec(package) is None:
        pytest.skip(f"{package} is not installed here (an optional extra)")
    assert getattr(_upstream, name) is not None


def test_the_transformers_internal_is_the_exporters_backend_table() -> None:
    pytest.importorskip("transformers")
    from transformers.exporters.exporter_executorch import prepare_for_xnnpack

    assert _upstream.transformers_backend_prepare["xnnpack"] is prepare_for_xnnpack


def test_a_moved_transformers_internal_names_the_release_it_was_written_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("transformers")
    monkeypatch.setitem(
        INTERNALS, "moved", ("transformers", "transformers.exporters.exporter_executorch", "_gone")
    )
    with pytest.raises(UnsupportedRelease, match=r"written for transformers 5\.24\.0 to 5\.25\.0"):
        _upstream.moved  # noqa: B018 - the access under test


def test_a_moved_internal_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(
        INTERNALS, "moved", ("executorch", "executorch.exir.program._program", "_gone")
    )
    with pytest.raises(
        UnsupportedRelease, match=r"_program has no attribute _gone.*written for executorch 1\.4\.1"
    ):
        _upstream.moved  # noqa: B018 - the access under test


def test_an_optional_internal_that_moved_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(INTERNALS, "moved", ("torch", "torch._no_such_module", "x"))
    assert _upstream.optional_internal("moved") is None


def _private_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            parts = node.module.split(".")
            if parts[0] not in _UPSTREAM_PACKAGES:
                continue
            names = [alias.name for alias in node.names]
            if any(p.startswith("_") for p in parts) or any(n.startswith("_") for n in names):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.module}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] in _UPSTREAM_PACKAGES and any(p.startswith("_") for p in parts):
                    found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {alias.name}")
    return found


def _modules() -> list[Path]:
    """Every module of xnnfold but the seam."""
    return [path for path in sorted(PACKAGE.rglob("*.py")) if path != Path(_upstream.__file__)]


def test_no_module_but_the_seam_imports_a_private_upstream_name() -> None:
    offenders = [hit for path in _modules() for hit in _private_imports(path)]
    assert offenders == []


# Private attribute access. An AST cannot tell an upstream object from one of xnnfold's, so
# every `x._name` (not a dunder) is an upstream internal except where the base says otherwise:
# - `self._name` / `cls._name` when xnnfold itself defines `_name` (a function or method, or
#   an attribute it assigns): a name it does not define would be inherited from an upstream
#   base class (a GEMM config, the partitioner);
# - `super()._name` when `_name` is an upstream hook xnnfold overrides, listed in
#   `UPSTREAM_NAMES` and checked with the releases;
# - `aten._name` (`torch.ops.aten._to_copy`, `exir_ops.edge.aten._to_copy`): an ATen operator's
#   registered name, which is its public schema name, not a Python private;
# - a base rooted in a standard-library import (`argparse._SubParsersAction`): not upstream.
# `getattr`, `hasattr` and `setattr` with a literal private name count as access too.
_OWN_BASES = ("self", "cls")
_OP_NAMESPACES = ("aten",)
_REFLECTION = ("getattr", "hasattr", "setattr", "delattr")
_UPSTREAM_HOOKS = frozenset(part for _, path in UPSTREAM_NAMES for part in path.split("."))


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _own_private_names(paths: list[Path]) -> frozenset[str]:
    """Private names xnnfold defines: its functions and methods, classes, and the names and
    attributes it assigns (a dataclass field, ``self._cache = ...``)."""
    names: set[str] = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
    return frozenset(name for name in names if _is_private(name))


def _stdlib_names(tree: ast.Module) -> frozenset[str]:
    """Names a module binds to standard-library imports (``import argparse``)."""
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in sys.stdlib_module_names:
                    bound.add(alias.asname or alias.name.split(".")[0])
        elif (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.level == 0
            and node.module.split(".")[0] in sys.stdlib_module_names
        ):
            bound.update(alias.asname or alias.name for alias in node.names)
    return frozenset(bound)


def _root(node: ast.expr) -> ast.expr:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node


def _upstream_access(
    base: ast.expr, name: str, own: frozenset[str], stdlib: frozenset[str]
) -> bool:
    """Whether ``base._name`` reaches a private name of an upstream object."""
    if isinstance(base, ast.Name) and base.id in _OWN_BASES:
        return name not in own
    if isinstance(base, ast.Call) and isinstance(base.func, ast.Name) and base.func.id == "super":
        return name not in _UPSTREAM_HOOKS
    last = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", None)
    if last in _OP_NAMESPACES:
        return False
    root = _root(base)
    return not (isinstance(root, ast.Name) and root.id in stdlib)


def _private_attributes(path: Path, own: frozenset[str]) -> Iterator[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    stdlib = _stdlib_names(tree)
    where = path.relative_to(PACKAGE.parent)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            base, name = node.value, node.attr
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _REFLECTION
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _is_private(node.args[1].value)
        ):
            base, name = node.args[0], node.args[1].value
        else:
            continue
        if _upstream_access(base, name, own, stdlib):
            yield f"{where}:{node.lineno} {ast.unparse(base)}.{name}"


def test_no_module_but_the_seam_reaches_a_private_upstream_attribute() -> None:
    modules = _modules()
    own = _own_private_names(modules)
    offenders = [hit for path in modules for hit in _private_attributes(path, own)]
    assert offenders == [], "reach these through an accessor in xnnfold/_upstream.py"


def test_the_edge_op_accessor_reads_the_aten_op() -> None:
    import torch

    assert (
        _upstream.aten_op_of(_upstream.exir_ops.edge.aten.mm.default) is torch.ops.aten.mm.default
    )


def test_the_signature_setter_replaces_the_signature() -> None:
    import copy

    import torch

    ep = torch.export.export(torch.nn.Linear(2, 2), (torch.randn(1, 2),))
    signature = copy.deepcopy(ep.graph_signature)
    _upstream.set_graph_signature(ep, signature)
    assert ep.graph_signature is signature


def test_the_schema_accessors_read_the_op() -> None:
    import torch

    op = torch.ops.aten.add.Tensor
    assert _upstream.schema_of(op).name == "aten::add"
    assert _upstream.overload_name_of(op) == "Tensor"


def test_the_hook_accessor_lists_a_legacy_weight_norm() -> None:
    import torch
    from torch.nn.utils.weight_norm import weight_norm, WeightNorm

    module = weight_norm(torch.nn.Linear(2, 2))
    hooks = _upstream.forward_pre_hooks_of(module)
    assert [type(hook) for hook in hooks] == [WeightNorm]


def test_the_conv_accessor_convolves_with_the_given_weight() -> None:
    import torch

    conv = torch.nn.Conv2d(2, 3, 3, padding=1)
    x, weight = torch.randn(1, 2, 5, 5), torch.randn(3, 2, 3, 3)
    expected = torch.nn.functional.conv2d(x, weight, conv.bias, padding=1)
    assert torch.equal(_upstream.conv_forward(conv, x, weight, conv.bias), expected)
