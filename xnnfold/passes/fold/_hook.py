"""Run `FoldComputedWeightsPass` first in XNNPACK preprocess.

executorch 1.5.1 has no seam for extra preprocess passes: `XnnpackBackend.preprocess` builds
its own pass list, and backends are found by class name among
`BackendDetails.__subclasses__()`, so a subclass would never be called. The smallest hook is
to wrap the one static method. The wrapper:

- acts only on a delegate whose GEMMs the folding partitioner marked; any other program
  goes to the stock preprocess untouched, so stock users see byte-identical output;
- is installed by `XnnpackFoldingPartitioner` when it partitions (importing xnnfold installs
  nothing), and installing twice is a no-op;
- is removed by `uninstall_preprocess_hook()`, which restores the original method object.
"""

from __future__ import annotations

import functools
import threading
from typing import Callable, Final

from executorch.backends.xnnpack.xnnpack_preprocess import XnnpackBackend
from executorch.exir.backend.backend_details import CompileSpec, PreprocessResult
from torch.export import ExportedProgram

from xnnfold.passes.fold._pass import FoldComputedWeightsPass, has_fold_marks

__all__ = [
    "install_preprocess_hook",
    "is_preprocess_hook_installed",
    "uninstall_preprocess_hook",
]

_ATTRIBUTE: Final = "preprocess"
# Set on the wrapper so that a second install (or another copy of xnnfold) recognises it.
_WRAPPED_MARK: Final = "__xnnfold_wrapped__"
_lock = threading.Lock()


def _current() -> object:
    return XnnpackBackend.__dict__[_ATTRIBUTE]


def is_preprocess_hook_installed() -> bool:
    """True while `XnnpackBackend.preprocess` runs the fold pass first."""
    return hasattr(_current(), _WRAPPED_MARK)


def _make_wrapper(
    original: Callable[[ExportedProgram, list[CompileSpec]], PreprocessResult],
) -> staticmethod:
    @functools.wraps(original)
    def preprocess(
        edge_program: ExportedProgram, compile_specs: list[CompileSpec]
    ) -> PreprocessResult:
        # executorch hands preprocess a private deep copy of the delegate's program, so
        # folding in place rewrites nothing that anyone else sees.
        if has_fold_marks(edge_program):
            FoldComputedWeightsPass(edge_program)(edge_program.graph_module)
        return original(edge_program, compile_specs)

    wrapper = staticmethod(preprocess)
    setattr(wrapper, _WRAPPED_MARK, _current())
    return wrapper


def install_preprocess_hook() -> None:
    """Make XNNPACK preprocess fold marked computations first. Idempotent."""
    with _lock:
        if is_preprocess_hook_installed():
            return
        original = XnnpackBackend.preprocess
        setattr(XnnpackBackend, _ATTRIBUTE, _make_wrapper(original))


def uninstall_preprocess_hook() -> None:
    """Restore the stock `XnnpackBackend.preprocess`. A no-op when not installed."""
    with _lock:
        current = _current()
        if hasattr(current, _WRAPPED_MARK):
            setattr(XnnpackBackend, _ATTRIBUTE, getattr(current, _WRAPPED_MARK))
