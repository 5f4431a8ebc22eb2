"""The one seam to executorch, torch, torchao, transformers and libcst internals, and their
releases.

xnnfold extends executorch's XNNPACK backend where it has no public seam: it overrides the
GEMM configs' dependency hooks, wraps `XnnpackBackend.preprocess`, reads executorch's
decomposition table, and reads a few private torch and libcst names; its transformers
integration swaps an entry of transformers' ExecuTorch backend-preparation table. A
release outside the tested range may have moved any of these, and a partitioner built on
a moved hook could silently behave like stock, or worse. So every private name is imported here and
nowhere else:

- `INTERNALS` lists each private module-level name, loaded on first use (``from
  xnnfold._upstream import EdgeOpOverload``) so that marking never imports executorch and
  the codemod never imports torch; a name that moved raises `UnsupportedRelease` naming
  it, the installed release and the releases xnnfold was written for;
- `UPSTREAM_NAMES` lists the private attributes xnnfold overrides or reads on upstream
  classes; the folding partitioner checks them, with the releases, when it is built
  (`check_releases`);
- the accessors below (`aten_op_of`, `schema_of`, `overload_name_of`,
  `forward_pre_hooks_of`, `conv_forward`, `set_graph_signature`) are the only code that
  reads or writes a private attribute of an upstream object.

`tests/install/test_upstream_seam.py` scans every other module for private imports and
private attribute access.
"""

from __future__ import annotations

import functools
import importlib
import logging
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Callable, Final, Optional, TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from executorch.backends.xnnpack._passes.xnnpack_pass import XNNPACKPass
    from executorch.exir.dialects._ops import ops as exir_ops
    from executorch.exir.dialects.edge._ops import EdgeOpOverload
    from executorch.exir.program._program import (
        _default_decomposition_table as default_decomposition_table,
    )
    from libcst._metadata_dependent import LazyValue
    from torch._ops import OpOverload
    from torch._subclasses.fake_tensor import is_fake, unset_fake_temporarily
    from torch.export import ExportedProgram
    from torch.export.graph_signature import ExportGraphSignature
    from torch.nn.utils.parametrizations import (
        _Orthogonal as OrthogonalParametrization,
    )
    from torch.nn.utils.parametrizations import (
        _SpectralNorm as SpectralNormParametrization,
    )
    from torch.nn.utils.parametrizations import (
        _WeightNorm as WeightNormParametrization,
    )
    from torch.utils._pytree import tree_flatten, tree_leaves
    from torchao.quantization.quant_api import _is_linear as quantize_default_filter

    # transformers.exporters.exporter_executorch._BACKEND_PREPARE: backend name ->
    # (model, sample_inputs) -> (model, sample_inputs, partitioners).
    transformers_backend_prepare: dict[str, Callable[..., Any]]

__all__ = [
    "DEFAULT_COMBINATION",
    "EXECUTORCH_RANGE",
    "TESTED_TRANSFORMERS",
    "TRANSFORMERS_RANGE",
    "INTERNALS",
    "EdgeOpOverload",
    "LazyValue",
    "OpOverload",
    "OrthogonalParametrization",
    "SpectralNormParametrization",
    "WeightNormParametrization",
    "XNNPACKPass",
    "aten_op_of",
    "conv_forward",
    "default_decomposition_table",
    "exir_ops",
    "external_data_files_of",
    "forward_pre_hooks_of",
    "is_fake",
    "optional_internal",
    "overload_name_of",
    "quantize_default_filter",
    "release_span",
    "real_value_of_fake",
    "schema_of",
    "set_graph_signature",
    "transformers_backend_prepare",
    "tree_flatten",
    "tree_leaves",
    "unset_fake_temporarily",
    "TESTED",
    "TESTED_COMBINATIONS",
    "TORCH_RANGE",
    "UPSTREAM_NAMES",
    "UnsupportedRelease",
    "check_releases",
    "check_transformers_release",
    "installed_version",
    "supports_bf16",
    "warn_if_deprecated_to_backend",
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


def _listing(releases: frozenset[str]) -> str:
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

# Every private module-level name xnnfold imports: our name -> (package, module, attribute).
INTERNALS: Final[dict[str, tuple[str, str, str]]] = {
    "EdgeOpOverload": ("executorch", "executorch.exir.dialects.edge._ops", "EdgeOpOverload"),
    "exir_ops": ("executorch", "executorch.exir.dialects._ops", "ops"),
    "default_decomposition_table": (
        "executorch",
        "executorch.exir.program._program",
        "_default_decomposition_table",
    ),
    "remove_invalid_ops_for_not_decompose": (
        "executorch",
        "executorch.exir.program._program",
        "_remove_invalid_ops_for_not_decompose",
    ),
    "XNNPACKPass": (
        "executorch",
        "executorch.backends.xnnpack._passes.xnnpack_pass",
        "XNNPACKPass",
    ),
    "OpOverload": ("torch", "torch._ops", "OpOverload"),
    "is_fake": ("torch", "torch._subclasses.fake_tensor", "is_fake"),
    "tree_flatten": ("torch", "torch.utils._pytree", "tree_flatten"),
    "tree_leaves": ("torch", "torch.utils._pytree", "tree_leaves"),
    "unset_fake_temporarily": ("torch", "torch._subclasses.fake_tensor", "unset_fake_temporarily"),
    "WeightNormParametrization": ("torch", "torch.nn.utils.parametrizations", "_WeightNorm"),
    "SpectralNormParametrization": ("torch", "torch.nn.utils.parametrizations", "_SpectralNorm"),
    "OrthogonalParametrization": ("torch", "torch.nn.utils.parametrizations", "_Orthogonal"),
    "LazyValue": ("libcst", "libcst._metadata_dependent", "LazyValue"),
    # Optional: only xnnfold.integrations.transformers reads it, after checking that
    # transformers is installed.
    "transformers_backend_prepare": (
        "transformers",
        "transformers.exporters.exporter_executorch",
        "_BACKEND_PREPARE",
    ),
    "quantize_default_filter": ("torchao", "torchao.quantization.quant_api", "_is_linear"),
    # The C++ `Module` with an external data file, for executorch 1.4.1, whose
    # `executorch.runtime` loads no `.ptd` (its `load_program` has no ``data_path``).
    "load_module_with_data": (
        "executorch",
        "executorch.extension.pybindings.portable_lib",
        "_load_for_executorch",
    ),
}
# The releases each package's internals above were written against.
_WRITTEN_FOR: Final[dict[str, str]] = {
    "executorch": _listing(TESTED["executorch"]),
    "torch": _listing(TESTED["torch"]),
    "libcst": "1.9",
    "transformers": release_span(TESTED["transformers"]),
    "torchao": "0.18",
}

# (module, attribute path) of every private class attribute the folding partitioner and
# the hook override or read. (The instance attributes the accessors below touch,
# `EdgeOpOverload._op`, `OpOverload._schema` and `_overloadname`, `Module._forward_pre_hooks`,
# `Conv2d._conv_forward` and `ExportedProgram._graph_signature`, are checked by
# tests/install/test_upstream_seam.py.)
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
        "executorch.backends.xnnpack.partition.xnnpack_partitioner",
        "XnnpackPartitioner._check_if_called_from_to_backend",
    ),
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
_TRANSFORMERS_FIX: Final = (
    "install a tested release (pip install 'transformers>={0},<{1}'), or export with "
    "transformers' own ExecutorchExporter().export (the stock partitioner)"
)


class UnsupportedRelease(RuntimeError):
    """The installed executorch, torch or transformers is not one xnnfold was tested with,
    or moved a private name xnnfold builds on."""


logger = logging.getLogger(__name__)


def _moved(name: str, problem: str) -> UnsupportedRelease:
    package = INTERNALS[name][0]
    found = installed_version(package) or "(version unknown)"
    return UnsupportedRelease(
        f"xnnfold: {problem}: a private {package} name xnnfold relies on, written for "
        f"{package} {_WRITTEN_FOR[package]}, and the installed {package} is {found}. "
        f"Install one of those releases, or report this {package} release to xnnfold."
    )


def _load(name: str) -> Any:
    package, module_name, attribute = INTERNALS[name]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        # Only the module itself (or a parent) missing means it moved; the package not
        # installed, or a dependency of it missing, is its own error.
        if error.name == package or error.name is None or not module_name.startswith(error.name):
            raise
        raise _moved(name, f"cannot import {module_name} ({error})") from error
    try:
        return getattr(module, attribute)
    except AttributeError as error:
        raise _moved(name, f"{module_name} has no attribute {attribute}") from error


def __getattr__(name: str) -> Any:
    # PEP 562: each internal is imported on first use, never as a side effect of another.
    if name in INTERNALS:
        value = _load(name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def optional_internal(name: str) -> Optional[Any]:
    """The internal ``name``, or None where the installed release lacks it: for callers that
    can decline safely without it."""
    if name in globals():
        return globals()[name]
    try:
        return __getattr__(name)
    except UnsupportedRelease:
        return None


def aten_op_of(target: EdgeOpOverload) -> OpOverload:
    """The ATen OpOverload an edge-dialect op wraps."""
    return target._op


def schema_of(op: OpOverload) -> torch.FunctionSchema:
    """An op's schema (name, mutability, returns); torch exposes it only as ``_schema``."""
    return op._schema


def overload_name_of(op: OpOverload) -> str:
    """``"Tensor"`` for ``aten.add.Tensor``: the overload's name within its packet."""
    return op._overloadname


def forward_pre_hooks_of(module: torch.nn.Module) -> list[Callable[..., Any]]:
    """The forward pre-hooks registered on ``module``, in the order they run (the legacy
    ``weight_norm`` and ``spectral_norm`` are such hooks; torch lists them nowhere else)."""
    return list(module._forward_pre_hooks.values())


def conv_forward(
    conv: torch.nn.Conv2d,
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor],
) -> torch.Tensor:
    """``conv``'s convolution of ``x`` with another weight and bias (its stride, padding,
    dilation, groups and padding mode): what a Conv2d subclass computing its weight runs."""
    return conv._conv_forward(x, weight, bias)


def warn_if_deprecated_to_backend(partitioner: Any) -> None:
    """What `XnnpackPartitioner.partition` adds to the partition it inherits: a warning,
    on executorch's logger, when the partitioner is called through the deprecated
    ``to_edge().to_backend()`` path (``partitioner`` is an `XnnpackPartitioner`)."""
    from executorch.backends.xnnpack.partition import xnnpack_partitioner

    if partitioner._check_if_called_from_to_backend():
        logging.getLogger(xnnpack_partitioner.__name__).warning(
            "\nDEPRECATION WARNING: the 'to_edge() + to_backend()' workflow is deprecated; "
            "use 'to_edge_transform_and_lower()'"
        )


def set_graph_signature(ep: ExportedProgram, signature: ExportGraphSignature) -> None:
    """Replace ``ep``'s signature in place (torch exposes no setter; its passes do the same)."""
    ep._graph_signature = signature


def external_data_files_of(program: Any) -> tuple[str, ...]:
    """The names of the external data files (``<name>.ptd``) an `ExecutorchProgramManager`
    writes with ``write_tensor_data_to_file``; executorch lists them only as
    ``_tensor_data``, keyed by name."""
    return tuple(sorted(getattr(program, "_tensor_data", None) or {}))


def real_value_of_fake(value: torch.Tensor) -> Optional[torch.Tensor]:
    """The real tensor a FakeTensor stands for when it carries one (a small constant under
    a decomposition's fake mode), else None."""
    return getattr(value, "constant", None)


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


def check_releases() -> None:
    """Check the installed executorch and torch before a folding partitioner is built.

    Raise `UnsupportedRelease` for a release older than every tested one (or whose version
    does not parse), or when a name in `UPSTREAM_NAMES` is missing. Log a WARNING for a
    release the suite did not run on but whose upstream names are all present: a newer
    release, a later patch of a tested minor, or tested releases in a new pairing. Older is
    refused because the fix (upgrading to a tested release) goes the way a user's stack
    goes anyway; newer is allowed because executorch declares no torch bound and a
    refusal would block the upgrade the rest of the stack accepts (docs/versions.md).
    """
    from packaging.version import Version

    fix = _FIX.format(*EXECUTORCH_RANGE)
    warnings: list[str] = []
    tested: dict[str, str] = {}
    for package in ("executorch", "torch"):
        found = installed_version(package)
        if found is None:
            continue  # a source build without metadata: the names below still decide
        warning = _release_warning(package, found, _listing(TESTED[package]), fix)
        if warning is None:
            tested[package] = Version(found).base_version
        else:
            warnings.append(warning)
    _check_upstream_names(fix)
    pair = (tested.get("torch"), tested.get("executorch"))
    if None not in pair and pair not in TESTED_COMBINATIONS:
        warnings.append(
            f"xnnfold: torch {pair[0]} with executorch {pair[1]} is a combination the suite "
            "has not run on (tested: "
            + ", ".join(f"torch {t} + executorch {e}" for t, e in sorted(TESTED_COMBINATIONS))
            + ")"
        )
    for message in warnings:
        logger.warning("%s", message)


def check_transformers_release() -> None:
    """Check the installed transformers before xnnfold.integrations.transformers exports.

    The policy torch and executorch have (`check_releases`): a tested release is quiet; a
    newer one, or an untested patch of a tested minor, logs a WARNING, once per process;
    an older one, or a version that does not parse, raises `UnsupportedRelease`. A private
    transformers name that moved raises `UnsupportedRelease` on its first use (`INTERNALS`).
    """
    found = installed_version("transformers")
    if found is None:
        return  # a source build without metadata: the exporter's names still decide
    fix = _TRANSFORMERS_FIX.format(*TRANSFORMERS_RANGE)
    warning = _release_warning("transformers", found, release_span(TESTED["transformers"]), fix)
    if warning is not None:
        _warn_once(warning)


@functools.cache
def _warn_once(message: str) -> None:
    """Log ``message`` as a WARNING the first time only: an export per call would repeat
    the same release's warning in every one."""
    logger.warning("%s", message)


def _check_upstream_names(fix: str) -> None:
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
