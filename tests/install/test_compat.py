"""The folding partitioner's release policy (docs/versions.md).

CI runs this file on every tested combination (.ci/run): there the installed releases pass
the check silently. A release older than every tested one, or an upstream name moved, stops
the partitioner with an error naming the release or the name and the fix; a newer release,
an untested patch release or an untested pairing is accepted with a WARNING. transformers,
for xnnfold.integrations.transformers, gets the same policy, its WARNING logged once.
"""

from __future__ import annotations

import re
from importlib.metadata import version
from typing import Callable, Iterator

import pytest

import xnnfold
from xnnfold import _releases, _upstream
from xnnfold._releases import (
    check_transformers_release,
    EXECUTORCH_RANGE,
    UnsupportedRelease,
)
from xnnfold._upstream import check_releases, INTERNALS

# The logger every release WARNING is on: docs/versions.md names it, and users filter on it.
LOGGER = "xnnfold._upstream"


def test_the_installed_releases_are_supported(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger=LOGGER):
        check_releases()
    # A tested release, not only one in the range. (Only this logger: the first import of
    # executorch's modules may log torchao's own warnings.)
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == []
    assert _releases._in_range(version("executorch"), EXECUTORCH_RANGE)
    xnnfold.XnnpackFoldingPartitioner()


def _installed(monkeypatch: pytest.MonkeyPatch, **found: str) -> None:
    """Make the release lookup answer ``found`` for the packages named, the truth for others."""
    real = _releases.version
    monkeypatch.setattr(_releases, "version", lambda name: found.get(name) or real(name))


@pytest.mark.parametrize(
    ("package", "found"),
    [
        ("executorch", "1.4.0"),
        ("executorch", "1.4.1rc1"),
        ("torch", "2.12.1"),
        ("torch", "2.13.0.dev20260101"),
    ],
)
def test_a_release_older_than_every_tested_one_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, package: str, found: str
) -> None:
    _installed(monkeypatch, **{package: found})
    with pytest.raises(
        UnsupportedRelease, match=rf"{package} {found} is older than the releases"
    ) as info:
        xnnfold.XnnpackFoldingPartitioner()
    assert "pip install torch==2.13.0 'executorch>=1.4.1,<1.6'" in str(info.value)


def test_a_version_that_does_not_parse_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    _installed(monkeypatch, torch="main-nightly")
    with pytest.raises(UnsupportedRelease, match=r"torch main-nightly is not a version like"):
        xnnfold.XnnpackFoldingPartitioner()


@pytest.mark.parametrize(
    ("package", "found"),
    [
        ("executorch", "1.6.0"),
        ("executorch", "1.6.0a0"),
        ("executorch", "2.0.0"),
        ("torch", "2.16.0"),
        ("torch", "2.16.0.dev20261201+cpu"),
        ("torch", "3.0.0"),
    ],
)
def test_a_release_newer_than_every_tested_one_is_accepted_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, package: str, found: str
) -> None:
    _installed(monkeypatch, **{package: found})
    with caplog.at_level("WARNING", logger=LOGGER):
        xnnfold.XnnpackFoldingPartitioner()
    assert f"{package} {found} is newer than every release xnnfold was tested with" in caplog.text


def test_a_newer_release_whose_upstream_name_moved_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _installed(monkeypatch, executorch="1.6.0")
    moved = ("executorch.backends.xnnpack.xnnpack_preprocess", "XnnpackBackend.gone")
    monkeypatch.setattr(_upstream, "UPSTREAM_NAMES", (*_upstream.UPSTREAM_NAMES, moved))
    with (
        caplog.at_level("WARNING", logger=LOGGER),
        pytest.raises(UnsupportedRelease, match=r"XnnpackBackend\.gone does not exist"),
    ):
        xnnfold.XnnpackFoldingPartitioner()
    # The refusal alone: no warning that the names are present.
    assert "is newer than" not in caplog.text


def test_a_newer_release_whose_internal_moved_is_refused_naming_the_release(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _installed(monkeypatch, torch="2.16.0")
    monkeypatch.setitem(INTERNALS, "moved", ("torch", "torch.utils._pytree", "_gone"))
    with pytest.raises(
        UnsupportedRelease, match=r"_pytree has no attribute _gone.*installed torch is 2\.16\.0"
    ):
        _upstream.moved  # noqa: B018 - the access under test


def test_an_untested_patch_release_in_the_range_is_accepted_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _installed(monkeypatch, executorch="1.5.2")
    with caplog.at_level("WARNING", logger=LOGGER):
        check_releases()
    assert [
        r.name
        for r in caplog.records
        if "executorch 1.5.2 is in the supported range but was not itself tested" in r.getMessage()
    ] == [LOGGER]


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
    monkeypatch.setattr(_releases, "version", lambda name: found[name])
    with caplog.at_level("WARNING", logger=LOGGER):
        check_releases()
    message = (
        f"torch {torch_found.split('+')[0]} with executorch {executorch_found} is a combination"
    )
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
    monkeypatch.setattr(_upstream, "UPSTREAM_NAMES", (*_upstream.UPSTREAM_NAMES, moved))
    with pytest.raises(
        UnsupportedRelease,
        match=moved[1].split(".")[-1] if "gone" in moved[1] else "no_such_module",
    ):
        xnnfold.XnnpackFoldingPartitioner()


@pytest.mark.parametrize(
    ("found", "standing"),
    [
        ("2.12.1", "older"),
        ("2.13.0rc1", "older"),
        ("2.13.0+cpu", "in range"),
        ("2.13.1", "in range"),
        ("2.14.1+cu130", "in range"),
        ("2.15.0", "in range"),
        ("2.16.0a0", "newer"),
        ("2.16.0", "newer"),
        ("10.0.0", "newer"),
    ],
)
def test_where_a_torch_release_stands_against_the_tested_range(found: str, standing: str) -> None:
    assert _releases._standing(found, ("2.13.0", "2.16")) == standing


def test_a_folding_config_that_would_not_replace_its_stock_config_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from xnnfold.passes.partition import _configs

    monkeypatch.setattr(_configs.FoldingLinearConfig, "target_name", "renamed.default")
    with pytest.raises(
        RuntimeError, match="FoldingLinearConfig must keep LinearConfig's target_name"
    ):
        xnnfold.XnnpackFoldingPartitioner()


# --- transformers (xnnfold.integrations.transformers): the same policy, warned once ---


@pytest.fixture
def transformers_warnings(caplog: pytest.LogCaptureFixture) -> Iterator[Callable[[], list[str]]]:
    """The release warnings the transformers check logs from here on, each run starting
    with none yet logged in this process."""
    _releases._warn_once.cache_clear()
    with caplog.at_level("WARNING", logger=LOGGER):
        yield lambda: [r.getMessage() for r in caplog.records if r.name == LOGGER]
    _releases._warn_once.cache_clear()


@pytest.mark.parametrize("found", ["5.24.0", "5.25.0"])
def test_a_tested_transformers_release_is_quiet(
    monkeypatch: pytest.MonkeyPatch,
    transformers_warnings: Callable[[], list[str]],
    found: str,
) -> None:
    _installed(monkeypatch, transformers=found)
    check_transformers_release()
    assert transformers_warnings() == []


@pytest.mark.parametrize("found", ["5.26.0", "5.26.0.dev0", "6.0.0"])
def test_a_newer_transformers_release_is_warned_about_once(
    monkeypatch: pytest.MonkeyPatch,
    transformers_warnings: Callable[[], list[str]],
    found: str,
) -> None:
    _installed(monkeypatch, transformers=found)
    check_transformers_release()
    check_transformers_release()
    (message,) = transformers_warnings()
    assert message.startswith(
        f"xnnfold: transformers {found} is newer than every release xnnfold was tested with "
        "(5.24.0 to 5.25.0)"
    )
    assert "pip install 'transformers>=5.24.0,<5.26'" in message


def test_an_untested_transformers_patch_release_is_warned_about(
    monkeypatch: pytest.MonkeyPatch, transformers_warnings: Callable[[], list[str]]
) -> None:
    _installed(monkeypatch, transformers="5.24.1")
    check_transformers_release()
    assert transformers_warnings() == [
        "xnnfold: transformers 5.24.1 is in the supported range but was not itself tested "
        "(tested: 5.24.0 to 5.25.0)"
    ]


@pytest.mark.parametrize("found", ["5.23.0", "5.24.0rc1", "4.57.6"])
def test_an_older_transformers_release_is_refused_naming_the_tested_range(
    monkeypatch: pytest.MonkeyPatch, found: str
) -> None:
    _installed(monkeypatch, transformers=found)
    with pytest.raises(
        UnsupportedRelease,
        match=rf"transformers {re.escape(found)} is older than the releases xnnfold was "
        r"tested with \(5\.24\.0 to 5\.25\.0; supported: >=5\.24\.0\)",
    ):
        check_transformers_release()
