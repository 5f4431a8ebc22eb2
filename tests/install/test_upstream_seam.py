"""The one seam: every private executorch, torch, torchao and libcst name is imported in
`_upstream`."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from xnnfold import _upstream
from xnnfold._upstream import INTERNALS, UnsupportedRelease

PACKAGE = Path(_upstream.__file__).parent
_UPSTREAM_PACKAGES = ("executorch", "torch", "torchao", "libcst")


@pytest.mark.parametrize("name", INTERNALS)
def test_every_internal_imports_on_this_release(name: str) -> None:
    assert getattr(_upstream, name) is not None


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


def test_no_module_but_the_seam_imports_a_private_upstream_name() -> None:
    offenders = [
        hit
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != Path(_upstream.__file__) and "fixtures" not in path.parts
        for hit in _private_imports(path)
    ]
    assert offenders == []


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
