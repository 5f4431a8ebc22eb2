"""The releases of torch, executorch and transformers xnnfold was tested with, and what an
installed release gets.

- `TESTED_COMBINATIONS` is the one table of tested (torch, executorch) pairs, with
  `DEFAULT_COMBINATION`, the pair the full suite runs on; `TESTED_TRANSFORMERS` lists the
  tested transformers releases. Everything else is derived from them: the releases per
  package (`TESTED`), the ranges the checks read as tested (`TORCH_RANGE`,
  `EXECUTORCH_RANGE`, `TRANSFORMERS_RANGE`) and the releases named in messages.
  pyproject.toml's extras, tox.ini, .ci/run and docs/versions.md list the same pairs
  (tests/install/test_supported_versions.py).
- The policy (docs/versions.md): a tested release is quiet; a newer release, an untested
  patch of a tested minor or tested releases in an untested pair get a WARNING; an older
  release, or a version that does not parse, raises `UnsupportedRelease`.
  `release_warnings` judges the installed torch and executorch (the seam's
  `xnnfold._upstream.check_releases` adds the check of the upstream names and logs the
  warnings), `check_transformers_release` the installed transformers.

The policy is kept apart from the seam (`xnnfold._upstream`, the private upstream names)
because the two change for different reasons: these tables with every release tested, the
seam only when a release moves a name. The seam imports from here (its errors name the
releases its names were written for), never the reverse
(tests/architecture/test_module_graph.py). Only the standard library is imported on import
(packaging on the first check), so the codemod, which reaches the seam for libcst's
`LazyValue`, needs neither torch nor packaging.
"""

from __future__ import annotations

import functools
import logging
from importlib.metadata import PackageNotFoundError, version
from typing import Final, Optional

__all__ = [
    "DEFAULT_COMBINATION",
    "EXECUTORCH_RANGE",
    "RELEASE_LOGGER",
    "STACK_FIX",
    "TESTED",
    "TESTED_COMBINATIONS",
    "TESTED_TRANSFORMERS",
    "TORCH_RANGE",
    "TRANSFORMERS_FIX",
    "TRANSFORMERS_RANGE",
    "UnsupportedRelease",
    "check_transformers_release",
    "installed_version",
    "release_listing",
    "release_span",
    "release_warnings",
]

# The one table of tested releases: each (torch, executorch) pair the suite passed on. The
# default stack runs the full suite, every other pair the fast tier (docs/versions.md).
# Everything below is derived from it, and pyproject.toml's xnnpack extra, tox.ini, .ci/run
# and docs/versions.md list the same pairs (tests/install/test_supported_versions.py).
TESTED_COMBINATIONS: Final[frozenset[tuple[str, str]]] = frozenset(
    {
        ("2.13.0", "1.4.1"),
        ("2.13.0", "1.5.0"),
        ("2.13.0", "1.5.1"),
        ("2.14.1", "1.5.1"),
        ("2.15.0", "1.5.1"),
    }
)
DEFAULT_COMBINATION: Final[tuple[str, str]] = ("2.13.0", "1.5.1")


def _release(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def _range_of(releases: frozenset[str]) -> tuple[str, str]:
    """[the lowest tested release, the minor release after the highest): the patch releases
    of a tested minor are in, the next minor is newer than any tested release."""
    highest = max(releases, key=_release)
    major, minor = _release(highest)[:2]
    return min(releases, key=_release), f"{major}.{minor + 1}"


def release_listing(releases: frozenset[str]) -> str:
    """``"2.13.0, 2.14.1 and 2.15.0"``: the releases in order, for messages."""
    ordered = sorted(releases, key=_release)
    return " and ".join(filter(None, (", ".join(ordered[:-1]), ordered[-1])))


def release_span(releases: frozenset[str]) -> str:
    """``"5.24.0 to 5.25.0"``: the lowest and highest release, for messages that name a
    range (a release in between that was not run is still one the range admits)."""
    ordered = sorted(releases, key=_release)
    return ordered[0] if len(ordered) == 1 else f"{ordered[0]} to {ordered[-1]}"


# The transformers releases xnnfold.integrations.transformers and transformers' own model
# classes ran on (tests/integrations, tests/end_to_end/test_transformers_models.py), each
# with the default stack, the newest also with the newest torch and executorch
# (docs/versions.md).
TESTED_TRANSFORMERS: Final[frozenset[str]] = frozenset({"5.24.0", "5.25.0"})

# Per package, the releases the suite passed on, and the range the release checks read as
# tested: [lowest tested, first minor past the highest tested). pyproject.toml's extras
# declare the lower bounds only: a newer release installs, and the checks decide.
TESTED: Final[dict[str, frozenset[str]]] = {
    "torch": frozenset(torch for torch, _ in TESTED_COMBINATIONS),
    "executorch": frozenset(executorch for _, executorch in TESTED_COMBINATIONS),
    "transformers": TESTED_TRANSFORMERS,
}
TORCH_RANGE: Final[tuple[str, str]] = _range_of(TESTED["torch"])
EXECUTORCH_RANGE: Final[tuple[str, str]] = _range_of(TESTED["executorch"])
TRANSFORMERS_RANGE: Final[tuple[str, str]] = _range_of(TESTED["transformers"])

# What the errors and warnings about a release tell the user to do: for torch and
# executorch (also when an upstream name the folding partitioner builds on is missing,
# `xnnfold._upstream.check_releases`), and for transformers.
STACK_FIX: Final[str] = (
    f"install a tested release (pip install torch=={DEFAULT_COMBINATION[0]} "
    f"'executorch>={EXECUTORCH_RANGE[0]},<{EXECUTORCH_RANGE[1]}'), or lower with "
    "executorch's XnnpackPartitioner"
)
TRANSFORMERS_FIX: Final[str] = (
    f"install a tested release (pip install 'transformers>={TRANSFORMERS_RANGE[0]},"
    f"<{TRANSFORMERS_RANGE[1]}'), or export with transformers' own "
    "ExecutorchExporter().export (the stock partitioner)"
)

# The logger of every release WARNING, torch's, executorch's and transformers': the seam's,
# where `check_releases` logs. docs/versions.md names it, and users filter on it.
RELEASE_LOGGER: Final = "xnnfold._upstream"
logger = logging.getLogger(RELEASE_LOGGER)


class UnsupportedRelease(RuntimeError):
    """The installed executorch, torch or transformers is not one xnnfold was tested with,
    or moved a private name xnnfold builds on."""


def installed_version(package: str) -> Optional[str]:
    """``package``'s installed version, or None for a build without metadata."""
    try:
        return version(package)
    except PackageNotFoundError:
        return None


# Where an installed release stands against its package's tested range.
_OLDER: Final = "older"
_IN_RANGE: Final = "in range"
_NEWER: Final = "newer"


def _standing(found: str, bounds: tuple[str, str]) -> Optional[str]:
    """Whether ``found`` is below ``bounds``, inside ``>=low,<high`` as pip reads it, or at or
    past ``high``; None for a version that does not parse. Pre-releases count as the release
    they lead to (``1.6.0a0`` is newer, ``1.4.1rc1`` older) and local labels (``+cpu``) are
    ignored."""
    # packaging comes with pip and torch; imported here so the codemod (which reaches the
    # seam for libcst's LazyValue) does not need it.
    from packaging.version import InvalidVersion, Version

    try:
        parsed = Version(Version(found).public)
    except InvalidVersion:
        return None
    if parsed < Version(bounds[0]):
        return _OLDER
    if parsed < Version(bounds[1]) and Version(parsed.base_version) != Version(bounds[1]):
        return _IN_RANGE
    return _NEWER


def _in_range(found: str, bounds: tuple[str, str]) -> bool:
    """Whether ``found`` satisfies ``>=low,<high`` as pip reads it (see `_standing`)."""
    return _standing(found, bounds) == _IN_RANGE


def _release_warning(package: str, found: str, tested: str, fix: str) -> Optional[str]:
    """The WARNING for ``package`` ``found`` against its tested releases (``tested`` names
    them in messages): None for a tested release; a message for a newer release or an
    untested patch of a tested minor. Raise `UnsupportedRelease` for an older release or a
    version that does not parse."""
    from packaging.version import Version

    bounds = _range_of(TESTED[package])
    standing = _standing(found, bounds)
    if standing is None or standing == _OLDER:
        problem = "is older than" if standing == _OLDER else "is not a version like"
        raise UnsupportedRelease(
            f"xnnfold: {package} {found} {problem} the releases xnnfold was tested with "
            f"({tested}; supported: >={bounds[0]}); {fix}"
        )
    if standing == _NEWER:
        return (
            f"xnnfold: {package} {found} is newer than every release xnnfold was tested "
            f"with ({tested}): the upstream names it builds on are present, but the suite "
            f"has not run on it; compare the lowered program's outputs with eager before "
            f"relying on it, or {fix}"
        )
    if Version(found).base_version not in TESTED[package]:
        return (
            f"xnnfold: {package} {found} is in the supported range but was not itself "
            f"tested (tested: {tested})"
        )
    return None


def release_warnings() -> list[str]:
    """The WARNINGs for the installed executorch and torch, in the order to log them.

    Raise `UnsupportedRelease` for a release older than every tested one (or whose version
    does not parse). Return a message for a release the suite did not run on: a newer
    release, a later patch of a tested minor, or tested releases in a new pairing; none
    for a tested pair. The message for a newer release says its upstream names are
    present, so it is logged only once they are found (`xnnfold._upstream.check_releases`).
    Older is refused because the fix (upgrading to a tested release) goes the way a user's
    stack goes anyway; newer is allowed because executorch declares no torch bound and a
    refusal would block the upgrade the rest of the stack accepts (docs/versions.md).
    """
    from packaging.version import Version

    warnings: list[str] = []
    tested: dict[str, str] = {}
    for package in ("executorch", "torch"):
        found = installed_version(package)
        if found is None:
            continue  # a source build without metadata: the upstream names still decide
        warning = _release_warning(package, found, release_listing(TESTED[package]), STACK_FIX)
        if warning is None:
            tested[package] = Version(found).base_version
        else:
            warnings.append(warning)
    pair = (tested.get("torch"), tested.get("executorch"))
    if None not in pair and pair not in TESTED_COMBINATIONS:
        warnings.append(
            f"xnnfold: torch {pair[0]} with executorch {pair[1]} is a combination the suite "
            "has not run on (tested: "
            + ", ".join(f"torch {t} + executorch {e}" for t, e in sorted(TESTED_COMBINATIONS))
            + ")"
        )
    return warnings


def check_transformers_release() -> None:
    """Check the installed transformers before xnnfold.integrations.transformers exports.

    The policy torch and executorch have (`release_warnings`): a tested release is quiet; a
    newer one, or an untested patch of a tested minor, logs a WARNING, once per process;
    an older one, or a version that does not parse, raises `UnsupportedRelease`. A private
    transformers name that moved raises `UnsupportedRelease` on its first use
    (`xnnfold._upstream.INTERNALS`).
    """
    found = installed_version("transformers")
    if found is None:
        return  # a source build without metadata: the exporter's names still decide
    warning = _release_warning(
        "transformers", found, release_span(TESTED["transformers"]), TRANSFORMERS_FIX
    )
    if warning is not None:
        _warn_once(warning)


@functools.cache
def _warn_once(message: str) -> None:
    """Log ``message`` as a WARNING the first time only: an export per call would repeat
    the same release's warning in every one."""
    logger.warning("%s", message)
