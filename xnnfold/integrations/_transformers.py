"""transformers' ExecuTorch exporter with the folding partitioner in place of the stock one.

``ExecutorchExporter.export_program`` looks its backend preparation up, on every call, in
the module table ``_BACKEND_PREPARE``; the ``"xnnpack"`` entry moves the model to CPU, picks
the MoE experts implementation XNNPACK runs, makes the inputs contiguous and returns the
partitioner list ``[XnnpackPartitioner()]``. That entry is the one seam: `export` puts a
`_FoldingPreparation` there, which calls the entry it replaced, swaps each stock
``XnnpackPartitioner`` in its list for an `XnnpackFoldingPartitioner` and marks the model's
computed weights (`prepare_for_xnnpack`, so reports name them); it then runs the stock
``ExecutorchExporter().export`` and puts the entry back, in a ``finally``. The patches, the
program and node fixes, the edge compile config, memory planning, the metadata and the
``ExportedModel`` are the exporter's own. An export during which the swapped entry never
ran on the exporting thread was lowered by the stock partitioner: `export` raises
`UnsupportedRelease` rather than return it.

The installed transformers gets the release policy torch and executorch have
(`xnnfold._releases.check_transformers_release`, docs/versions.md).

Thread safety: a lock is held from the swap to the restore, so these exports run one at a
time; the swapped entry acts only on the thread that installed it, so a stock
``ExecutorchExporter`` export on another thread meanwhile still gets the stock partitioner.
"""

from __future__ import annotations

import importlib
import importlib.util
import threading
from collections.abc import Mapping, MutableMapping
from types import ModuleType
from typing import Any, Callable, Final, Optional

from xnnfold import _releases, _upstream

__all__ = [
    "EXPORTER_MODULE",
    "INSTALL_HINT",
    "XNNPACK_BACKEND",
    "export",
    "require_transformers",
]

EXPORTER_MODULE: Final = "transformers.exporters.exporter_executorch"
# The ExecutorchConfig backend (and _BACKEND_PREPARE key) the folding partitioner serves.
XNNPACK_BACKEND: Final = "xnnpack"
INSTALL_HINT: Final = 'pip install "xnnfold[transformers]"'
_PACKAGE: Final = "transformers"
_RELEASE_HINT: Final = (
    f"pip install 'transformers>={_releases.TRANSFORMERS_RANGE[0]},"
    f"<{_releases.TRANSFORMERS_RANGE[1]}'"
)
_CALLER: Final = "xnnfold.integrations.transformers.export"

# (model, sample_inputs) -> (model, sample_inputs, partitioners): a backend preparation.
Preparation = Callable[[Any, Any], tuple[Any, Any, list[Any]]]

# Held from the swap of the table entry to its restore.
_LOCK: Final = threading.Lock()


def _tested() -> str:
    """``"transformers 5.24.0 to 5.25.0"``: the releases this integration ran on."""
    return f"transformers {_releases.release_span(_releases.TESTED_TRANSFORMERS)}"


def _missing(detail: str) -> ImportError:
    return ImportError(
        f"xnnfold.integrations.transformers needs transformers' ExecuTorch exporter "
        f"({EXPORTER_MODULE}, {_tested()}), and {detail}; install it with: {INSTALL_HINT}",
        name=_PACKAGE,
    )


def _unlike_tested(problem: str) -> _releases.UnsupportedRelease:
    found = _releases.installed_version(_PACKAGE) or "(version unknown)"
    return _releases.UnsupportedRelease(
        f"{_CALLER}: {problem}; the installed transformers {found} prepares XNNPACK unlike "
        f"{_tested()}, which this integration was written for; install one of those with: "
        f"{_RELEASE_HINT}, or export with transformers' ExecutorchExporter().export"
    )


def require_transformers() -> None:
    """Raise an ImportError naming the extra to install when transformers is missing.

    Looks the package up without importing it (importing transformers' exporter takes
    seconds; `export` does it)."""
    try:
        found = importlib.util.find_spec(_PACKAGE) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise _missing("transformers is not installed")


def _exporter_module() -> ModuleType:
    require_transformers()
    try:
        return importlib.import_module(EXPORTER_MODULE)
    except ModuleNotFoundError as error:
        missing = error.name or ""
        # The exporter module or a parent of it missing: a transformers without the
        # ExecuTorch exporter. Anything else missing is its own error.
        if missing != EXPORTER_MODULE and not EXPORTER_MODULE.startswith(f"{missing}."):
            raise
        found = _releases.installed_version(_PACKAGE) or "(version unknown)"
        raise _missing(f"the installed transformers {found} has no {missing}") from error


def _executorch_config(module: ModuleType, config: Optional[Any]) -> Any:
    """``config`` as the ``ExecutorchConfig`` the exporter would build from it, refused
    unless its backend is XNNPACK."""
    config_class = module.ExecutorchConfig
    if config is None:
        return config_class(backend=XNNPACK_BACKEND)
    if isinstance(config, Mapping):
        config = config_class(**config)
    elif not isinstance(config, config_class):
        raise TypeError(
            f"{_CALLER}: config is a {type(config).__name__}; expected an ExecutorchConfig "
            f"(transformers.exporters.ExecutorchConfig), a dict of its fields, or None for "
            f"ExecutorchConfig(backend={XNNPACK_BACKEND!r})"
        )
    if config.backend != XNNPACK_BACKEND:
        raise ValueError(
            f"{_CALLER}: config.backend is {config.backend!r}, and xnnfold's folding "
            f"partitioner is an XNNPACK partitioner (expected backend={XNNPACK_BACKEND!r}); "
            f"pass ExecutorchConfig(backend={XNNPACK_BACKEND!r}) or no config, or export for "
            f"{config.backend!r} with transformers' ExecutorchExporter().export"
        )
    return config


class _FoldingPreparation:
    """The ``"xnnpack"`` backend preparation while `export` runs on ``thread``: the stock
    one, then its ``XnnpackPartitioner`` replaced by an `XnnpackFoldingPartitioner` and the
    model's computed weights marked. On any other thread, or once ``thread`` is None, the
    stock one alone."""

    def __init__(
        self, stock: Preparation, stock_partitioner: type, thread: int, *, tie_tables: bool
    ) -> None:
        self.stock = stock
        self.stock_partitioner = stock_partitioner
        self.thread: Optional[int] = thread
        self.tie_tables = tie_tables
        # The models this preparation marked, for `export` to unmark.
        self.marked: list[Any] = []
        # How many partitioner lists it swapped on ``thread``: `export` refuses a program
        # lowered without one.
        self.swapped = 0

    def __call__(self, model: Any, sample_inputs: Any) -> tuple[Any, Any, list[Any]]:
        model, sample_inputs, partitioners = self.stock(model, sample_inputs)
        if threading.get_ident() != self.thread:
            return model, sample_inputs, partitioners
        folding = self._folding(model, list(partitioners))
        self.swapped += 1
        return model, sample_inputs, folding

    def _folding(self, model: Any, partitioners: list[Any]) -> list[Any]:
        from torch import nn

        from xnnfold.passes import CrossMethodFacts, XnnpackFoldingPartitioner
        from xnnfold.rewriter import is_prepared, prepare_for_xnnpack

        if not any(type(p) is self.stock_partitioner for p in partitioners):
            raise _unlike_tested(
                f"transformers' {XNNPACK_BACKEND!r} backend preparation returned the "
                f"partitioners {[type(p).__name__ for p in partitioners]}, none an "
                f"XnnpackPartitioner to replace"
            )
        if isinstance(model, nn.Module) and not is_prepared(model):
            prepare_for_xnnpack(model)
            self.marked.append(model)
        # The preparation runs once per export: one lowering, one set of facts.
        facts = CrossMethodFacts()
        return [
            XnnpackFoldingPartitioner(facts=facts, tie_tables=self.tie_tables)
            if type(p) is self.stock_partitioner
            else p
            for p in partitioners
        ]


def export(
    model: Any,
    sample_inputs: MutableMapping[str, Any],
    config: Optional[Any] = None,
    *,
    tie_tables: bool = False,
) -> Any:
    """``ExecutorchExporter().export(model, sample_inputs, config)`` with xnnfold's folding
    partitioner in place of the stock ``XnnpackPartitioner``.

    Args:
        model: the transformers model (or any ``nn.Module`` the exporter takes), in eval
            mode when it uses spectral_norm.
        sample_inputs: the forward kwargs, as for the exporter (``{"input_values": ...}``).
        config: an ``ExecutorchConfig`` with ``backend="xnnpack"``, a dict of its fields, or
            None for ``ExecutorchConfig(backend="xnnpack")``.
        tie_tables: store a tied embedding (``tie_word_embeddings``) once, in an
            external data file (`XnnpackFoldingPartitioner`'s option, docs/tied-tables.md).
            Off by default, as everywhere the caller writes the files: the exporter's
            ``save_pretrained`` and its runner read a ``.pte`` alone, so they cannot load
            such a program; write it with ``xnnfold.save(exported.program, "model.pte")``,
            which writes ``model.ptd`` beside it, and load the ``.pte`` with that file.

    Returns:
        The exporter's ``ExportedModel``: ``.program`` is the ``ExecutorchProgramManager``
        (``xnnfold.explain`` reads it), calling it runs the program on the exporter's runner,
        and ``save_pretrained`` writes the ``.pte`` with its metadata and the model config.

    Raises:
        ImportError: transformers, or its ExecuTorch exporter, is not installed.
        ValueError: ``config`` is for another backend than XNNPACK.
        TypeError: ``config`` is not an ``ExecutorchConfig``, a dict or None.
        UnsupportedRelease: the installed transformers is older than every tested
            release, moved the backend preparation table, builds no ``XnnpackPartitioner``
            in its XNNPACK preparation, or exported without calling that preparation on
            this thread. (A newer release than every tested one logs a WARNING, once.)

    transformers' exporter is left exactly as it was, also when the export raises; the
    model gets the exporter's own changes (``requires_grad_(False)``, moved to CPU) and no
    marks of xnnfold's unless it had them before.
    """
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    from xnnfold.rewriter import unprepare_for_xnnpack

    require_transformers()
    _releases.check_transformers_release()
    module = _exporter_module()
    config = _executorch_config(module, config)
    exporter = module.ExecutorchExporter()
    table: MutableMapping[str, Preparation] = _upstream.transformers_backend_prepare
    with _LOCK:
        stock = table.get(XNNPACK_BACKEND)
        if stock is None:
            raise _unlike_tested(
                f"transformers' backend preparation table has no {XNNPACK_BACKEND!r} entry "
                f"(it has {sorted(table)})"
            )
        preparation = _FoldingPreparation(
            stock, XnnpackPartitioner, threading.get_ident(), tie_tables=tie_tables
        )
        table[XNNPACK_BACKEND] = preparation
        try:
            exported = exporter.export(model, sample_inputs, config)
            if not preparation.swapped:
                # The exporter lowered without the entry on this thread (it called it from
                # another thread, or no longer looks it up in the table): its program has
                # the stock partitioner's delegates, which is not what was asked for.
                raise _unlike_tested(
                    f"transformers' exporter never called its {XNNPACK_BACKEND!r} backend "
                    f"preparation (_BACKEND_PREPARE[{XNNPACK_BACKEND!r}]) on the exporting "
                    f"thread, so the folding partitioner was not used; expected "
                    f"ExecutorchExporter.export to look that entry up and call it on the "
                    f"calling thread"
                )
            return exported
        finally:
            preparation.thread = None
            # Someone else's entry installed meanwhile stays; ours is inert from here on.
            if table.get(XNNPACK_BACKEND) is preparation:
                table[XNNPACK_BACKEND] = stock
            for marked in preparation.marked:
                unprepare_for_xnnpack(marked)
