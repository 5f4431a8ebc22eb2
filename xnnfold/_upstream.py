"""The one seam to executorch, torch, torchao, transformers and libcst internals.

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
  classes; the folding partitioner checks them, with the installed releases, when it is
  built (`check_releases`);
- the accessors below (`aten_op_of`, `schema_of`, `overload_name_of`,
  `forward_pre_hooks_of`, `conv_forward`, `warn_if_deprecated_to_backend`,
  `set_graph_signature`, `external_data_files_of`, `real_value_of_fake`) are the only code
  that reads or writes a private attribute of an upstream object, and `supports_bf16`
  asks the installed configs what they take, `serializes_tanh_gelu` the serializer.

Which releases were tested, and what an installed one gets, is the release policy,
`xnnfold._releases`: it changes with every release tested, this module only when a release
moves a name. This module imports from it (the releases its names were written for, the
policy's verdict on the installed torch and executorch, which `check_releases` logs with
the check of the names), never the reverse.

`tests/architecture/test_upstream_seam.py` scans every other module for private imports and
private attribute access.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any, Callable, Final, Optional, TYPE_CHECKING

# As a module, so that no name of the release policy is also an attribute of the seam.
from xnnfold import _releases

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
    "INTERNALS",
    "EdgeOpOverload",
    "LazyValue",
    "OpOverload",
    "OrthogonalParametrization",
    "SpectralNormParametrization",
    "UPSTREAM_NAMES",
    "WeightNormParametrization",
    "XNNPACKPass",
    "aten_op_of",
    "check_releases",
    "conv_forward",
    "default_decomposition_table",
    "exir_ops",
    "external_data_files_of",
    "forward_pre_hooks_of",
    "is_fake",
    "optional_internal",
    "overload_name_of",
    "quantize_default_filter",
    "real_value_of_fake",
    "schema_of",
    "set_graph_signature",
    "supports_bf16",
    "transformers_backend_prepare",
    "tree_flatten",
    "tree_leaves",
    "unset_fake_temporarily",
    "warn_if_deprecated_to_backend",
]

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
    "executorch": _releases.release_listing(_releases.TESTED["executorch"]),
    "torch": _releases.release_listing(_releases.TESTED["torch"]),
    "libcst": "1.9",
    "transformers": _releases.release_span(_releases.TESTED["transformers"]),
    "torchao": "0.18",
}

# (module, attribute path) of every private class attribute the folding partitioner and
# the hook override or read. (The instance attributes the accessors below touch,
# `EdgeOpOverload._op`, `OpOverload._schema` and `_overloadname`, `Module._forward_pre_hooks`,
# `Conv2d._conv_forward` and `ExportedProgram._graph_signature`, are checked by
# tests/architecture/test_upstream_seam.py.)
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

logger = logging.getLogger(_releases.RELEASE_LOGGER)


def _moved(name: str, problem: str) -> _releases.UnsupportedRelease:
    package = INTERNALS[name][0]
    found = _releases.installed_version(package) or "(version unknown)"
    return _releases.UnsupportedRelease(
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
    except _releases.UnsupportedRelease:
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


def check_releases() -> None:
    """Check the installed executorch and torch before a folding partitioner is built.

    Raise `UnsupportedRelease` for a release older than every tested one (or whose version
    does not parse), or when a name in `UPSTREAM_NAMES` is missing. Log a WARNING for a
    release the suite did not run on but whose upstream names are all present: a newer
    release, a later patch of a tested minor, or tested releases in a new pairing. The
    releases are judged by the release policy (`xnnfold._releases.release_warnings`, which
    says why older is refused and newer allowed); its warnings are logged only once the
    names are found, since a release missing one is refused instead.
    """
    warnings = _releases.release_warnings()
    _check_upstream_names(_releases.STACK_FIX)
    for message in warnings:
        logger.warning("%s", message)


def _check_upstream_names(fix: str) -> None:
    for module_name, path in UPSTREAM_NAMES:
        try:
            value: object = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            raise _releases.UnsupportedRelease(
                f"xnnfold: the installed executorch has no module {module_name} "
                f"({error}), and the folding partitioner builds on it; {fix}"
            ) from error
        for attribute in path.split("."):
            if not hasattr(value, attribute):
                raise _releases.UnsupportedRelease(
                    f"xnnfold: {module_name}.{path} does not exist in the installed "
                    f"executorch, and the folding partitioner builds on it; {fix}"
                )
            value = getattr(value, attribute)


def supports_bf16() -> bool:
    """Whether the installed XNNPACK configs take ``enable_bf16`` (executorch 1.5.0 and
    later); 1.4.1's ignore the keyword, so the option would silently do nothing."""
    from executorch.backends.xnnpack.partition.config.gemm_configs import LinearConfig

    return getattr(LinearConfig(enable_bf16=True), "enable_bf16", False) is True


# The XNNPACK graph node for tanh GELU, in serializers that have one.
_APPROXIMATE_GELU_NODE: Final = "XNNApproxGelu"


def serializes_tanh_gelu() -> bool:
    """Whether the installed XNNPACK serializer writes ``gelu(approximate="tanh")`` as
    tanh GELU: only where its graph schema has an approximate-GELU node. executorch
    1.5.1's has none, and its GELU visitor drops ``approximate``, so a delegated tanh GELU
    there computes exact GELU."""
    from executorch.backends.xnnpack.serialization import xnnpack_graph_schema

    return hasattr(xnnpack_graph_schema, _APPROXIMATE_GELU_NODE)
