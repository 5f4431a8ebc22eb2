"""What the folding configs are given, and what they find: both as values.

A folding config is built with one `FoldContext` and never changes afterwards: the fold
options, the facts of the program being partitioned that one method cannot see alone
(`_facts`: the buffers another method writes, the constants some method stores anyway),
and the decisions of the matching round it serves (`non_folding`, `fold_anyway`). A round
that needs other decisions gets new configs built with a new context.

executorch asks a config only for booleans and node lists (``check_constraints``,
``get_partition``), so what a config finds on the way (why it declined a computed weight,
an argument XNNPACK cannot compute, a fold shared with other GEMMs) is reported to the
`collected` call that runs it, which returns it as `Findings`. Outside such a call the
reports go nowhere.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Callable, Mapping, Optional, TypeVar

from torch.fx import Node

from xnnfold.passes._codes import Problem
from xnnfold.passes._options import FoldOptions
from xnnfold.passes.analysis import Rejection

__all__ = [
    "collected",
    "DEFAULT_CONTEXT",
    "FoldContext",
    "Findings",
    "report_accepted",
    "report_argument_problem",
    "report_findings",
    "report_rejection",
    "report_shared_fold",
]

T = TypeVar("T")


@dataclass(frozen=True)
class FoldContext:
    """Everything a folding config decides with.

    ``fold``: off means the stock decisions. ``options``: the `FoldOptions` the fold pass
    re-checks each fold with. ``written_buffers``: buffers (by FQN) some method of the
    program writes, never constants. ``stored_elsewhere``: constants (by FQN) some method
    stores whatever folds, so folding a computation of them frees none of their bytes.
    ``non_folding``: GEMMs (by name) the previous round took without folding a
    computed-constant argument, or declined: they keep what they read. ``fold_anyway``:
    GEMMs declined only to keep the program small whose sources a delegate would copy
    anyway (see `_matching`).
    """

    fold: bool = True
    options: FoldOptions = FoldOptions()
    written_buffers: frozenset[str] = frozenset()
    stored_elsewhere: frozenset[str] = frozenset()
    non_folding: frozenset[str] = frozenset()
    fold_anyway: frozenset[str] = frozenset()

    def deciding(self, *, non_folding: frozenset[str], fold_anyway: frozenset[str]) -> FoldContext:
        """This context with a matching round's decisions."""
        return replace(self, non_folding=non_folding, fold_anyway=fold_anyway)


# Stock decisions are not the default: `fold` is on, with the default options, no facts.
DEFAULT_CONTEXT = FoldContext()


@dataclass(frozen=True)
class Findings:
    """What the configs found while a call ran: the computed arguments they declined,
    by (GEMM, argument index); the GEMMs declined for an argument XNNPACK cannot compute
    whatever the weight, by name; and the GEMMs accepted with a computation shared with
    other GEMMs' weights, by name."""

    rejections: Mapping[tuple[Node, int], Rejection] = field(
        default_factory=lambda: MappingProxyType({})
    )
    argument_problems: Mapping[str, Problem] = field(default_factory=lambda: MappingProxyType({}))
    shared_folds: frozenset[str] = frozenset()


class _Record:
    """The findings of one `collected` call while it runs (private to it)."""

    def __init__(self) -> None:
        self.rejections: dict[tuple[Node, int], Rejection] = {}
        self.argument_problems: dict[str, Problem] = {}
        self.shared_folds: set[str] = set()

    def freeze(self) -> Findings:
        return Findings(
            MappingProxyType(dict(self.rejections)),
            MappingProxyType(dict(self.argument_problems)),
            frozenset(self.shared_folds),
        )


_RECORD: ContextVar[Optional[_Record]] = ContextVar("xnnfold_findings", default=None)


def collected(run: Callable[[], T]) -> tuple[T, Findings]:
    """``run()`` and what the configs it ran reported."""
    record = _Record()
    token = _RECORD.set(record)
    try:
        value = run()
    finally:
        _RECORD.reset(token)
    return value, record.freeze()


def report_rejection(gemm: Node, arg_index: int, rejection: Rejection) -> None:
    record = _RECORD.get()
    if record is not None:
        record.rejections[(gemm, arg_index)] = rejection


def report_accepted(gemm: Node, arg_index: int) -> None:
    """The argument is taken after all (a later precision, a later check)."""
    record = _RECORD.get()
    if record is not None:
        record.rejections.pop((gemm, arg_index), None)


def report_argument_problem(gemm: Node, problem: Problem) -> None:
    record = _RECORD.get()
    if record is not None:
        record.argument_problems[gemm.name] = problem


def report_shared_fold(gemm: Node) -> None:
    record = _RECORD.get()
    if record is not None:
        record.shared_folds.add(gemm.name)


def report_findings(findings: Findings) -> None:
    """Hand a finished matching's findings to the enclosing `collected` call, in place
    of anything reported before: executorch's ``generate_partitions`` returns partitions
    only, and the partitioner reports on the matching they came from."""
    record = _RECORD.get()
    if record is not None:
        record.rejections = dict(findings.rejections)
        record.argument_problems = dict(findings.argument_problems)
        record.shared_folds = set(findings.shared_folds)
