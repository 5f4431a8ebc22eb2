"""The folding partitioner refuses executorch and torch releases it was not tested with.

CI runs this file on every supported executorch release (.ci/run, stage 2): there the
installed release passes the check; outside the range, or with an upstream name moved, the
partitioner stops with an error naming the release or the name and the fix.
"""

from __future__ import annotations

from importlib.metadata import version

import pytest

import xnnfold
from xnnfold.passes import _compat
from xnnfold.passes._compat import EXECUTORCH_RANGE, UnsupportedRelease, check_releases


def test_the_installed_releases_are_supported() -> None:
    check_releases()
    assert _compat._in_range(version("executorch"), EXECUTORCH_RANGE)
    xnnfold.XnnpackFoldingPartitioner()


@pytest.mark.parametrize(
    ("package", "found"),
    [("executorch", "1.6.0"), ("executorch", "1.4.0"), ("executorch", "1.6.0a0"), ("torch", "2.14.1")],
)
def test_an_untested_release_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, package: str, found: str
) -> None:
    real = _compat.version
    monkeypatch.setattr(_compat, "version", lambda name: found if name == package else real(name))
    with pytest.raises(UnsupportedRelease, match=rf"{package} {found} is not a release") as info:
        xnnfold.XnnpackFoldingPartitioner()
    assert "pip install torch==2.13.0 'executorch>=1.4.1,<1.6'" in str(info.value)


def test_a_moved_upstream_name_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        _compat,
        "UPSTREAM_NAMES",
        (*_compat.UPSTREAM_NAMES, ("executorch.backends.xnnpack.xnnpack_preprocess", "XnnpackBackend.gone")),
    )
    with pytest.raises(UnsupportedRelease, match=r"XnnpackBackend\.gone does not exist"):
        xnnfold.XnnpackFoldingPartitioner()


@pytest.mark.parametrize(
    ("found", "expected"),
    [("2.13.0+cpu", True), ("2.13.1", True), ("2.14.0", False), ("1.5.1", False)],
)
def test_torch_range(found: str, expected: bool) -> None:
    assert _compat._in_range(found, _compat.TORCH_RANGE) is expected


def test_pyproject_declares_the_checked_ranges() -> None:
    import tomllib
    from pathlib import Path

    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    extra = set(project["optional-dependencies"]["xnnpack"])
    assert extra == {
        f"torch>={_compat.TORCH_RANGE[0]},<{_compat.TORCH_RANGE[1]}",
        f"executorch>={EXECUTORCH_RANGE[0]},<{EXECUTORCH_RANGE[1]}",
    }
