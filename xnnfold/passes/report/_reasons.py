"""Why a GEMM stayed outside the delegate, in words a user can act on.

The stock XNNPACK configs explain every rejection with `WhyNoPartition`, but only at DEBUG
level, so a model whose GEMMs fall to the portable kernels is just slow, silently. The
folding partitioner collects those reasons (and its own) while it partitions, writes the
one that applies onto each GEMM it left out (`REASON_META_KEY`), and `xnnfold.explain`
reads them back from the lowered program.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
from typing import Iterator, Optional

from executorch.exir.backend.utils import WhyNoPartition
from torch.export import ExportedProgram
from torch.fx import Graph, GraphModule, Node

from xnnfold._meta import NN_MODULE_STACK_META_KEY
from xnnfold.passes._graph_walk import walk
from xnnfold.passes._ops import STOCK_WHY_LOGGERS
from xnnfold.passes.analysis import constant_fqns, is_gemm

__all__ = ["collect_why_reasons", "module_path", "reads_parameters"]

# The walk behind a run-time weight only looks for a parameter a few ops away; a weight
# that is an activation reaches parameters only through other GEMMs, where the walk stops.
_MAX_WALK = 256
ROOT_MODULE: str = "<root>"


def module_path(node: Node) -> str:
    """The path of the innermost module that called ``node`` ("<root>" for the model)."""
    stack = node.meta.get(NN_MODULE_STACK_META_KEY)
    if not stack:
        return ROOT_MODULE
    path = list(stack.values())[-1][0]
    return path or ROOT_MODULE


def reads_parameters(node: Node, ep: ExportedProgram) -> bool:
    """True when ``node`` is computed from a parameter without passing through a GEMM.

    Tells a per-sample weight (``self.weight * style``), which a user would expect to be a
    weight, from an attention operand (``k.transpose(-1, -2)``), which reaches parameters
    only through the projection GEMM that produced it.
    """

    def inputs(current: Node) -> list[Node]:
        if current.op == "placeholder" or (current is not node and is_gemm(current)):
            return []
        return current.all_input_nodes

    constants = constant_fqns(ep)
    return any(
        current.op == "placeholder" and current.name in constants
        for current in itertools.islice(walk([node], inputs), _MAX_WALK)
    )


class _WhyCollector(logging.Handler):
    """Keeps the first `WhyNoPartition` reason logged for each node of one lowering: by
    its thread, and when given, only for nodes of its graphs."""

    def __init__(self, graphs: Optional[frozenset[Graph]]) -> None:
        super().__init__(level=logging.DEBUG)
        self.reasons: dict[str, str] = {}
        self._thread = threading.get_ident()
        self._graphs = graphs

    def emit(self, record: logging.LogRecord) -> None:
        # record.thread is None under `logging.logThreads = False`: the graph decides then.
        if record.thread is not None and record.thread != self._thread:
            return  # another lowering's reasons
        why = record.msg
        # WhyNoPartition logs itself and is reused: read it now, while it holds this call.
        # (The stock configs share one per module, so a lowering in another thread can
        # overwrite it between its assignment and this read; the graph check keeps such a
        # reason from being filed under a node of this graph's name.)
        if not isinstance(why, WhyNoPartition) or not isinstance(why.node, Node):
            return
        if self._graphs is not None and why.node.graph not in self._graphs:
            return
        self.reasons.setdefault(why.node.name, why.reason)


class _Gate(logging.Filter):
    """The filter on a stock logger while lowerings collect its reasons.

    It hands every record to the collectors (each keeps its own thread's), then lets a
    record on to the logger's handlers and its ancestors' only at or above the level the
    logger had before collection lowered it: the DEBUG reasons xnnfold enabled print
    nothing, and a WARNING from any thread is handled exactly as without xnnfold.
    """

    def __init__(self, threshold: int) -> None:
        super().__init__()
        self.threshold = threshold
        self.collectors: list[logging.Handler] = []

    def filter(self, record: logging.LogRecord) -> bool:
        for collector in list(self.collectors):
            collector.handle(record)
        return record.levelno >= self.threshold


class _LoggerLevels:
    """The stock loggers' levels while any lowering collects reasons, refcounted.

    The first collection to start saves each logger's level, enables DEBUG where it was
    not, and installs a `_Gate`; the last to end removes the gates and restores the
    levels, in whatever order concurrent lowerings end. Propagation is never changed.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active = 0
        self._saved: list[tuple[logging.Logger, int, _Gate]] = []

    def enter(self, collector: logging.Handler) -> None:
        with self._lock:
            if self._active == 0:
                self._saved = []
                for name in STOCK_WHY_LOGGERS:
                    target = logging.getLogger(name)
                    gate = _Gate(threshold=target.getEffectiveLevel())
                    self._saved.append((target, target.level, gate))
                    target.addFilter(gate)
                    if not target.isEnabledFor(logging.DEBUG):
                        target.setLevel(logging.DEBUG)
            self._active += 1
            for _, _, gate in self._saved:
                gate.collectors.append(collector)

    def exit(self, collector: logging.Handler) -> None:
        with self._lock:
            for _, _, gate in self._saved:
                gate.collectors.remove(collector)
            self._active -= 1
            if self._active == 0:
                for target, level, gate in self._saved:
                    target.removeFilter(gate)
                    target.setLevel(level)
                self._saved = []


_LEVELS = _LoggerLevels()


@contextlib.contextmanager
def collect_why_reasons(
    graph_module: Optional[GraphModule] = None,
) -> Iterator[dict[str, str]]:
    """Collect the stock configs' DEBUG rejection reasons of this thread, {node name: reason},
    only for nodes of ``graph_module``'s graphs (its submodules' included) when given.

    While any thread collects, a stock logger that was not already enabled for DEBUG is,
    behind a filter that passes on only what the logger passed on before (`_Gate`), so
    enabling it prints nothing the user did not ask for and hides nothing they did; the
    last collection to end restores every logger. Thread-safe: each collection keeps only
    the records its own thread logs.
    """
    graphs = (
        None
        if graph_module is None
        else frozenset(m.graph for m in graph_module.modules() if isinstance(m, GraphModule))
    )
    collector = _WhyCollector(graphs)
    _LEVELS.enter(collector)
    try:
        yield collector.reasons
    finally:
        _LEVELS.exit(collector)
