"""Run `FoldComputedWeightsPass` and `ExactTanhGeluPass` first in XNNPACK preprocess.

executorch has no seam for extra preprocess passes: `XnnpackBackend.preprocess` builds its
own pass list, and backends are found by class name among `BackendDetails.__subclasses__()`,
so a subclass would never be called. The smallest hook is to wrap the one static method.

Lifecycle (the process state xnnfold keeps is listed in docs/architecture.md):

- importing xnnfold installs nothing; `XnnpackFoldingPartitioner` installs the hook when
  what it found in a partition has a fold or a tanh GELU to compute exactly, and
  `install_preprocess_hook()` does it by hand;
- the wrapper acts only on a delegate xnnfold's partitioner tagged
  (`partitioned_by_xnnfold`); any other program goes to the stock preprocess untouched,
  so while it is installed stock lowerings still give byte-identical programs. Within
  xnnfold's delegates it folds and rewrites only what is marked (a GEMM's `FoldMark`, a
  tanh GELU's `TanhGeluMark`). The tag decides, not a mark: a mark stays on the
  delegate's output in the top-level graph, and a later delegate of another partitioner
  that reads that output gets it on its input placeholder. Once the stock preprocess
  has serialized one of xnnfold's delegates, the wrapper empties the constants of its
  private copy, which executorch keeps until the last delegate is preprocessed, and
  after a marked one it hands the heap's free pages back to the system (`_heap`: glibc
  keeps what the fold freed resident otherwise);
- where executorch copies a delegate's program through
  `copy_exported_program_for_preprocess`, the hook also gives each of xnnfold's
  delegates a copy whose constants share the original's storage (`_shared_copy`), so no
  delegated constant is held twice while every delegate waits for preprocess; any other
  program is copied by the method it inherits;
- it stays installed until `uninstall_preprocess_hook()`, which puts back exactly the
  method objects it replaced;
- another wrapper of `preprocess` may sit on top of or under it: installing again while
  ours is anywhere in the chain is a no-op (never a second fold), and uninstalling while
  someone else's wrapper sits on top raises instead of silently leaving ours active.
"""

from __future__ import annotations

import functools
import threading
import weakref
from typing import Any, Callable, Final, Optional

from executorch.backends.xnnpack.xnnpack_preprocess import XnnpackBackend
from executorch.exir.backend.backend_details import CompileSpec, PreprocessResult
from torch.export import ExportedProgram

from xnnfold.passes.fold._heap import release_freed_memory
from xnnfold.passes.fold._pass import FoldComputedWeightsPass, has_fold_marks
from xnnfold.passes.fold._shared_copy import copy_sharing_constants, partitioned_by_xnnfold
from xnnfold.passes.fold._tanh_gelu import ExactTanhGeluPass

__all__ = [
    "install_preprocess_hook",
    "is_preprocess_hook_installed",
    "uninstall_preprocess_hook",
]

_ATTRIBUTE: Final = "preprocess"
# The classmethod executorch copies a delegate's program with before preprocess (absent
# from older releases, which deep-copy inline: there the copy stays theirs).
_COPY_ATTRIBUTE: Final = "copy_exported_program_for_preprocess"
# What `XnnpackBackend.__dict__` held under `_COPY_ATTRIBUTE` before the hook: usually
# nothing (the method is inherited from `BackendDetails`).
_ABSENT: Final = object()
# Set on our staticmethod (never on its function: `functools.wraps` copies a function's
# attributes onto whoever wraps it): the method object it replaced.
_WRAPPED_MARK: Final = "__xnnfold_wrapped__"
# How far down a chain of other wrappers (`__wrapped__`, `__func__`) ours is looked for.
_MAX_CHAIN: Final = 32
_lock = threading.Lock()
# Our wrapper functions, recognised by identity under someone else's wrapper.
_OUR_FUNCTIONS: weakref.WeakSet[Callable[..., PreprocessResult]] = weakref.WeakSet()


def _current() -> object:
    return XnnpackBackend.__dict__[_ATTRIBUTE]


def _ours_in_chain(method: object) -> bool:
    """Whether our wrapper is ``method`` or sits under it in a chain of wrappers."""
    seen = 0
    pending: list[object] = [method]
    while pending and seen < _MAX_CHAIN:
        current = pending.pop()
        seen += 1
        if (isinstance(current, staticmethod) and hasattr(current, _WRAPPED_MARK)) or (
            callable(current) and current in _OUR_FUNCTIONS
        ):
            return True
        for attribute in ("__func__", "__wrapped__"):
            inner = getattr(current, attribute, None)
            if inner is not None:
                pending.append(inner)
    return False


def is_preprocess_hook_installed() -> bool:
    """True while `XnnpackBackend.preprocess` runs the fold pass first."""
    return _ours_in_chain(_current())


def _make_wrapper(
    original: Callable[[ExportedProgram, list[CompileSpec]], PreprocessResult],
    replaced: object,
) -> staticmethod:
    @functools.wraps(original)
    def preprocess(
        edge_program: ExportedProgram, compile_specs: list[CompileSpec]
    ) -> PreprocessResult:
        # executorch hands preprocess a private copy of the delegate's program (its
        # constants' storage shared, never written), so folding in place rewrites
        # nothing that anyone else sees.
        if not partitioned_by_xnnfold(edge_program):
            return original(edge_program, compile_specs)
        marked = has_fold_marks(edge_program)
        if marked:
            FoldComputedWeightsPass(edge_program)(edge_program.graph_module)
            ExactTanhGeluPass(edge_program)(edge_program.graph_module)
        result = original(edge_program, compile_specs)
        # Its constants are serialized into the result: executorch keeps every copy
        # until the last delegate is preprocessed, so the folded weights (and the
        # tensors XNNPACK's own passes made, such as a fused batch norm) would sit
        # beside their bytes that long.
        edge_program.state_dict.clear()
        edge_program.constants.clear()
        if marked:
            # What the fold added is free now; glibc would keep most of it resident.
            release_freed_memory()
        return result

    _OUR_FUNCTIONS.add(preprocess)
    wrapper = staticmethod(preprocess)
    setattr(wrapper, _WRAPPED_MARK, replaced)
    return wrapper


def _make_copy(replaced: object) -> classmethod[Any, Any, ExportedProgram]:
    inherited = XnnpackBackend.copy_exported_program_for_preprocess

    def copy_exported_program_for_preprocess(
        cls: type, edge_program: ExportedProgram, compile_specs: list[CompileSpec]
    ) -> ExportedProgram:
        if partitioned_by_xnnfold(edge_program):
            return copy_sharing_constants(edge_program)
        return inherited(edge_program, compile_specs)

    method: classmethod[Any, Any, ExportedProgram] = classmethod(
        copy_exported_program_for_preprocess
    )
    setattr(method, _WRAPPED_MARK, replaced)
    return method


def _install_copy() -> None:
    if not hasattr(XnnpackBackend, _COPY_ATTRIBUTE):
        return
    replaced = XnnpackBackend.__dict__.get(_COPY_ATTRIBUTE, _ABSENT)
    if hasattr(replaced, _WRAPPED_MARK):
        return
    setattr(XnnpackBackend, _COPY_ATTRIBUTE, _make_copy(replaced))


def _uninstall_copy() -> None:
    current = XnnpackBackend.__dict__.get(_COPY_ATTRIBUTE, _ABSENT)
    replaced = getattr(current, _WRAPPED_MARK, None)
    if replaced is None:
        return
    if replaced is _ABSENT:
        delattr(XnnpackBackend, _COPY_ATTRIBUTE)
    else:
        setattr(XnnpackBackend, _COPY_ATTRIBUTE, replaced)


def install_preprocess_hook() -> None:
    """Make XNNPACK preprocess fold marked computations first.

    Idempotent: a no-op while the hook is anywhere in the chain of wrappers of
    `XnnpackBackend.preprocess`.
    """
    with _lock:
        if is_preprocess_hook_installed():
            return
        replaced = _current()
        setattr(XnnpackBackend, _ATTRIBUTE, _make_wrapper(XnnpackBackend.preprocess, replaced))
        _install_copy()


def uninstall_preprocess_hook() -> None:
    """Restore the `XnnpackBackend.preprocess` the hook replaced. A no-op when not installed.

    Raises:
        RuntimeError: another wrapper of `preprocess` was installed on top of the hook;
            taking ours out from under it is not possible, and leaving it in place while
            saying it is gone would keep folding. Remove that wrapper first.
    """
    with _lock:
        current = _current()
        replaced: Optional[object] = (
            getattr(current, _WRAPPED_MARK, None) if isinstance(current, staticmethod) else None
        )
        if replaced is not None:
            setattr(XnnpackBackend, _ATTRIBUTE, replaced)
            _uninstall_copy()
            return
        if _ours_in_chain(current):
            # functools.wraps copies our name onto theirs: where it is defined says more.
            code = getattr(getattr(current, "__func__", current), "__code__", None)
            name = f"defined at {code.co_filename}:{code.co_firstlineno}" if code else repr(current)
            raise RuntimeError(
                f"xnnfold: XnnpackBackend.preprocess was wrapped again ({name}) after "
                "xnnfold installed its preprocess hook, so the hook cannot be taken out "
                "from under it. Restore that wrapper's original first, then call "
                "uninstall_preprocess_hook() again."
            )
