"""pyproject.toml's extras admit what the release checks accept, so installing xnnfold never
makes pip refuse or downgrade a release the checks would run on (docs/versions.md).

The release checks (`check_releases`, `check_transformers_release`) refuse a release older
than every tested one and accept a newer one with a WARNING; the extras the user installs
(`xnnpack`, `transformers`) agree on both sides. The test-only `models` extra is pinned to a
tested transformers release: a new release may change the architectures under test.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from xnnfold import _releases
from xnnfold._releases import TESTED

ROOT = Path(__file__).parents[2]
# The extras a user installs; `models` is for the suite only.
USER_EXTRAS: Final = ("xnnpack", "transformers")
# (extra, package): each release-checked package a user extra requires.
REQUIRED: Final = (
    ("xnnpack", "torch"),
    ("xnnpack", "executorch"),
    ("transformers", "torch"),
    ("transformers", "executorch"),
    ("transformers", "transformers"),
)


def _extras() -> dict[str, list[str]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras: dict[str, list[str]] = project["optional-dependencies"]
    return extras


def _requirements(extra: str) -> list[Requirement]:
    """What ``pip install "xnnfold[extra]"`` requires, xnnfold's own extras expanded."""
    found = []
    for text in _extras()[extra]:
        requirement = Requirement(text)
        if canonicalize_name(requirement.name) == "xnnfold":
            for inner in sorted(requirement.extras):
                found += _requirements(inner)
        else:
            found.append(requirement)
    return found


def _admits(extra: str, package: str, release: str) -> bool:
    """Whether every requirement of ``extra`` on ``package`` admits ``release`` (as pip
    does with ``--pre`` for a pre-release)."""
    return all(
        requirement.specifier.contains(release, prereleases=True)
        for requirement in _requirements(extra)
        if canonicalize_name(requirement.name) == package
    )


def _newer(package: str) -> list[str]:
    """Releases past every tested one: the next minor, its pre-release and nightly, the
    next major, and one far off."""
    major, minor = Version(max(TESTED[package], key=Version)).release[:2]
    return [
        f"{major}.{minor + 1}.0",
        f"{major}.{minor + 1}.0rc1",
        f"{major}.{minor + 1}.0.dev20261201",
        f"{major + 1}.0.0",
        f"{major + 10}.0.0",
    ]


def _older(package: str) -> list[str]:
    """Releases before every tested one: the previous minor, and the lowest's release
    candidate."""
    lowest = min(TESTED[package], key=Version)
    major, minor = Version(lowest).release[:2]
    return [f"{major}.{minor - 1}.0", f"{lowest}rc1"]


def _bounds(package: str) -> tuple[str, str]:
    return _releases._range_of(TESTED[package])


def test_the_transformers_extra_keeps_a_current_stack() -> None:
    # transformers 5.25.0 with torch 2.15.0 and executorch 1.5.1: what a current project
    # runs; `pip install "xnnfold[transformers]"` into it must change none of them.
    current = {"transformers": "5.25.0", "torch": "2.15.0", "executorch": "1.5.1"}
    assert {
        package: _admits("transformers", package, release) for package, release in current.items()
    } == dict.fromkeys(current, True)


@pytest.mark.parametrize(("extra", "package"), REQUIRED)
def test_no_extra_caps_a_release_the_check_accepts_with_a_warning(extra: str, package: str) -> None:
    newer = _newer(package)
    # What the run-time check does with them: a WARNING, not a refusal (tests/install/test_compat.py).
    assert {_releases._standing(release, _bounds(package)) for release in newer} == {"newer"}
    assert [release for release in newer if not _admits(extra, package, release)] == []


@pytest.mark.parametrize(("extra", "package"), REQUIRED)
def test_no_extra_admits_a_release_the_check_refuses(extra: str, package: str) -> None:
    older = _older(package)
    assert {_releases._standing(release, _bounds(package)) for release in older} == {"older"}
    assert [release for release in older if _admits(extra, package, release)] == []


def test_every_user_extra_requires_the_stack_it_checks() -> None:
    # The cases above cover every requirement the user extras have.
    named = {
        (extra, canonicalize_name(r.name)) for extra in USER_EXTRAS for r in _requirements(extra)
    }
    assert named == set(REQUIRED)


def test_the_models_extra_pins_a_tested_transformers_release() -> None:
    (requirement,) = _requirements("models")
    (pin,) = requirement.specifier
    assert (requirement.name, pin.operator) == ("transformers", "==")
    assert pin.version in TESTED["transformers"]
