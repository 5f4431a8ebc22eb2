"""Which executorch and torch releases xnnfold was tested with, and a check that says so.

xnnfold extends executorch's XNNPACK backend where it has no public seam: it overrides the
GEMM configs' dependency hooks, wraps `XnnpackBackend.preprocess` and reads executorch's
decomposition table. A release outside the tested range may have moved any of these, and
a partitioner built on a moved hook could silently behave like stock, or worse. So the
folding partitioner checks, when it is built, that the installed releases are ones the
suite ran on and that every upstream name it relies on is where it expects; otherwise it
stops with an error naming the release, the missing name and the fix.
"""

from __future__ import annotations

import importlib
import logging
from importlib.metadata import PackageNotFoundError, version
from typing import Final, Optional

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

__all__ = [
    "EXECUTORCH_RANGE",
    "TESTED",
    "TESTED_COMBINATIONS",
    "TORCH_RANGE",
    "UPSTREAM_NAMES",
    "UnsupportedRelease",
    "check_releases",
    "installed_version",
    "supports_bf16",
]

# [lowest, first not supported), as pyproject.toml's xnnpack extra declares them (README,
# "Supported versions"), and inside them the releases the suite passed on: a later patch
# release in the range is accepted with a WARNING.
EXECUTORCH_RANGE: Final[tuple[str, str]] = ("1.4.1", "1.6")
TORCH_RANGE: Final[tuple[str, str]] = ("2.13.0", "2.15")
TESTED: Final[dict[str, frozenset[str]]] = {
    "executorch": frozenset({"1.4.1", "1.5.0", "1.5.1"}),
    "torch": frozenset({"2.13.0", "2.14.1"}),
}
# (torch, executorch) pairs the suite passed on: torch 2.14.1 ran with executorch 1.5.1 only.
TESTED_COMBINATIONS: Final[frozenset[tuple[str, str]]] = frozenset(
    {("2.13.0", "1.4.1"), ("2.13.0", "1.5.0"), ("2.13.0", "1.5.1"), ("2.14.1", "1.5.1")}
)

# (module, attribute path) of every upstream name the folding partitioner and the hook
# override or read.
UPSTREAM_NAMES: Final[tuple[tuple[str, str], ...]] = (
    ("executorch.backends.xnnpack.partition.config.gemm_configs", "GEMMConfig._get_weight_deps"),
    ("executorch.backends.xnnpack.partition.config.gemm_configs", "GEMMConfig._get_bias_deps"),
    ("executorch.backends.xnnpack.partition.config.gemm_configs", "GEMMConfig.get_deps"),
    ("executorch.backends.xnnpack.partition.config.gemm_configs", "AddmmConfig"),
    ("executorch.backends.xnnpack.partition.config.gemm_configs", "MMConfig"),
    ("executorch.backends.xnnpack.partition.config.gemm_configs", "LinearConfig"),
    ("executorch.backends.xnnpack.partition.config.gemm_configs", "ConvolutionConfig"),
    ("executorch.backends.xnnpack.xnnpack_preprocess", "XnnpackBackend.preprocess"),
    (
        "executorch.exir.backend.canonical_partitioners.config_partitioner",
        "ConfigerationBasedPartitioner.get_matched_nodes_from_configs",
    ),
    ("executorch.exir.program._program", "_default_decomposition_table"),
)

_FIX: Final = (
    "install a tested release (pip install torch==2.13.0 'executorch>={0},<{1}'), or lower "
    "with executorch's XnnpackPartitioner"
)


class UnsupportedRelease(RuntimeError):
    """The installed executorch or torch is not one xnnfold was tested with."""


logger = logging.getLogger(__name__)


def _in_range(found: str, bounds: tuple[str, str]) -> bool:
    """Whether ``found`` satisfies ``>=low,<high`` as pip reads it, pre-releases and local
    labels (``+cpu``) included: ``1.6.0a0`` is not below 1.6, ``1.4.1rc1`` is below 1.4.1."""
    try:
        parsed = Version(found)
    except InvalidVersion:
        return False
    return SpecifierSet(f">={bounds[0]},<{bounds[1]}").contains(parsed.public, prereleases=True) and not (
        parsed.is_prerelease and Version(parsed.base_version) == Version(bounds[1])
    )


def check_releases() -> None:
    """Raise `UnsupportedRelease` unless executorch and torch are tested releases and
    every name in `UPSTREAM_NAMES` exists."""
    fix = _FIX.format(*EXECUTORCH_RANGE)
    tested: dict[str, str] = {}
    for package, bounds in (("executorch", EXECUTORCH_RANGE), ("torch", TORCH_RANGE)):
        found = installed_version(package)
        if found is None:
            continue  # a source build without metadata: the names below still decide
        if not _in_range(found, bounds):
            raise UnsupportedRelease(
                f"xnnfold: {package} {found} is not a release xnnfold was tested with "
                f"(>={bounds[0]},<{bounds[1]}); {fix}"
            )
        if Version(found).base_version not in TESTED[package]:
            logger.warning(
                "xnnfold: %s %s is in the supported range but was not itself tested "
                "(tested: %s)",
                package,
                found,
                ", ".join(sorted(TESTED[package])),
            )
        else:
            tested[package] = Version(found).base_version
    pair = (tested.get("torch"), tested.get("executorch"))
    if None not in pair and pair not in TESTED_COMBINATIONS:
        logger.warning(
            "xnnfold: torch %s with executorch %s is a combination the suite has not run on "
            "(tested: %s)",
            *pair,
            ", ".join(f"torch {t} + executorch {e}" for t, e in sorted(TESTED_COMBINATIONS)),
        )
    for module_name, path in UPSTREAM_NAMES:
        try:
            value: object = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            raise UnsupportedRelease(
                f"xnnfold: the installed executorch has no module {module_name} "
                f"({error}), and the folding partitioner builds on it; {fix}"
            ) from error
        for attribute in path.split("."):
            if not hasattr(value, attribute):
                raise UnsupportedRelease(
                    f"xnnfold: {module_name}.{path} does not exist in the installed "
                    f"executorch, and the folding partitioner builds on it; {fix}"
                )
            value = getattr(value, attribute)


def supports_bf16() -> bool:
    """Whether the installed XNNPACK configs take ``enable_bf16`` (executorch 1.5.0 and
    later); 1.4.1's ignore the keyword, so the option would silently do nothing."""
    from executorch.backends.xnnpack.partition.config.gemm_configs import LinearConfig

    return getattr(LinearConfig(enable_bf16=True), "enable_bf16", False) is True


def installed_version(package: str) -> Optional[str]:
    """``package``'s installed version, or None for a build without metadata."""
    try:
        return version(package)
    except PackageNotFoundError:
        return None
