"""The folding partitioner refuses executorch and torch releases it was not tested with.

CI runs this file on every supported executorch release (.ci/run, stage 2): there the
installed release passes the check; outside the range, or with an upstream name moved, the
partitioner stops with an error naming the release or the name and the fix.
"""

from __future__ import annotations

from importlib.metadata import version

import pytest

import xnnfold
from xnnfold import _upstream as _compat
from xnnfold._upstream import EXECUTORCH_RANGE, UnsupportedRelease, check_releases


def test_the_installed_releases_are_supported(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger=_compat.__name__):
        check_releases()
    # A tested release, not only one in the range. (Only this logger: the first import of
    # executorch's modules may log torchao's own warnings.)
    assert [r.getMessage() for r in caplog.records if r.name == _compat.__name__] == []
    assert _compat._in_range(version("executorch"), EXECUTORCH_RANGE)
    xnnfold.XnnpackFoldingPartitioner()


@pytest.mark.parametrize(
    ("package", "found"),
    [
        ("executorch", "1.6.0"),
        ("executorch", "1.4.0"),
        ("executorch", "1.4.1rc1"),
        ("executorch", "1.6.0a0"),
        ("torch", "2.16.0"),
        ("torch", "2.13.0.dev20260101"),
    ],
)
def test_an_untested_release_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, package: str, found: str
) -> None:
    real = _compat.version
    monkeypatch.setattr(_compat, "version", lambda name: found if name == package else real(name))
    with pytest.raises(UnsupportedRelease, match=rf"{package} {found} is not a release") as info:
        xnnfold.XnnpackFoldingPartitioner()
    assert "pip install torch==2.13.0 'executorch>=1.4.1,<1.6'" in str(info.value)


def test_an_untested_patch_release_in_the_range_is_accepted_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real = _compat.version
    monkeypatch.setattr(_compat, "version", lambda name: "1.5.2" if name == "executorch" else real(name))
    with caplog.at_level("WARNING", logger=_compat.__name__):
        check_releases()
    assert "executorch 1.5.2 is in the supported range but was not itself tested" in caplog.text


@pytest.mark.parametrize(
    ("torch_found", "executorch_found", "warned"),
    [("2.14.1", "1.4.1", True), ("2.14.1+cu130", "1.5.1", False), ("2.13.0+cpu", "1.4.1", False)],
)
def test_an_untested_combination_of_tested_releases_is_accepted_with_a_warning(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    torch_found: str,
    executorch_found: str,
    warned: bool,
) -> None:
    found = {"torch": torch_found, "executorch": executorch_found}
    monkeypatch.setattr(_compat, "version", lambda name: found[name])
    with caplog.at_level("WARNING", logger=_compat.__name__):
        check_releases()
    message = f"torch {torch_found.split('+')[0]} with executorch {executorch_found} is a combination"
    assert (message in caplog.text) is warned, caplog.text


@pytest.mark.parametrize(
    "moved",
    [
        ("executorch.backends.xnnpack.xnnpack_preprocess", "XnnpackBackend.gone"),
        ("executorch.backends.xnnpack.no_such_module", "Anything"),
    ],
    ids=["attribute", "module"],
)
def test_a_moved_upstream_name_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, moved: tuple[str, str]
) -> None:
    monkeypatch.setattr(_compat, "UPSTREAM_NAMES", (*_compat.UPSTREAM_NAMES, moved))
    with pytest.raises(UnsupportedRelease, match=moved[1].split(".")[-1] if "gone" in moved[1] else "no_such_module"):
        xnnfold.XnnpackFoldingPartitioner()


@pytest.mark.parametrize(
    ("found", "expected"),
    [
        ("2.13.0+cpu", True),
        ("2.13.1", True),
        ("2.14.1+cu130", True),
        ("2.15.0", True),
        ("2.16.0", False),
        ("2.16.0a0", False),
        ("1.5.1", False),
    ],
)
def test_torch_range(found: str, expected: bool) -> None:
    assert _compat._in_range(found, _compat.TORCH_RANGE) is expected


def test_pyproject_declares_the_checked_ranges() -> None:
    import tomllib
    from pathlib import Path

    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"]
    extra = set(project["optional-dependencies"]["xnnpack"])
    assert extra == {
        f"torch>={_compat.TORCH_RANGE[0]},<{_compat.TORCH_RANGE[1]}",
        f"executorch>={EXECUTORCH_RANGE[0]},<{EXECUTORCH_RANGE[1]}",
    }


def test_a_folding_config_that_would_not_replace_its_stock_config_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from xnnfold.passes.partition import _configs

    monkeypatch.setattr(_configs.FoldingLinearConfig, "target_name", "renamed.default")
    with pytest.raises(RuntimeError, match="FoldingLinearConfig must keep LinearConfig's target_name"):
        xnnfold.XnnpackFoldingPartitioner()
