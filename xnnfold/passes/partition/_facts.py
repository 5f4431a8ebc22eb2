"""The cross-method constant facts: what the methods of one lowering do with each constant.

A program's methods can share constant tensors: one method writes a buffer another reads
(``set_gain``), or stores a table another multiplies by. Folding a shared constant is
only right, and only saves bytes, when no method writes it and no method stores it anyway;
a dict of per-method partitioners gives each method its own partitioner, so what one
method does is known only through a record every folding partitioner of the thread shares.

The record relies on the order in which `to_edge_transform_and_lower` calls partitioners:
it asks every method's partitioners for ``ops_to_not_decompose`` on the method's ATen
program before it partitions any method (``tests/partition/test_call_order.py`` fails on a
release that stops doing so). After lowering it asks again, on each edge program, to check
the kept ops; the partitioners recognise that question and leave the record alone. So:

- each ``ops_to_not_decompose`` adds the method's writes and stored constants to the
  record (`ConstantFacts.record`), and by partition time every method's facts are in;
- the first question after a partition starts a new record (`ConstantFacts.start_question`),
  so one lowering's facts never decline the next one's folds.

Were executorch to partition a method before asking about the next one, the first method
would partition without the later methods' facts: it could fold a buffer a later method
writes. The record is per thread: a lowering runs in one thread, and another thread's
lowering starting a record must not erase this one's before it partitions. Entries are
keyed by the tensor's id and hold it weakly (a WeakSet would compare tensors with ``==``),
which also keeps one model's facts from declining another model's constant of the same
name.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Optional

import torch

__all__ = ["ConstantFact", "ConstantFacts", "constant_facts"]


@dataclass
class ConstantFact:
    """What the methods lowered so far do with one constant tensor."""

    tensor: weakref.ref[torch.Tensor]
    written: bool = False
    stored: bool = False


class ConstantFacts:
    """Constant tensors of the programs being lowered, by id, with what some method does
    with each: writes it, or stores it whatever folds."""

    def __init__(self) -> None:
        self.by_id: dict[int, ConstantFact] = {}
        self.partitioned = False

    def start_question(self) -> None:
        """An ``ops_to_not_decompose`` begins: after a partition, a new lowering's record."""
        if self.partitioned:
            self.by_id.clear()
            self.partitioned = False
        for key in [k for k, fact in self.by_id.items() if fact.tensor() is None]:
            del self.by_id[key]

    def get(self, tensor: torch.Tensor) -> Optional[ConstantFact]:
        fact = self.by_id.get(id(tensor))
        return fact if fact is not None and fact.tensor() is tensor else None

    def record(self, tensor: torch.Tensor) -> ConstantFact:
        fact = self.get(tensor)
        if fact is None:
            fact = self.by_id[id(tensor)] = ConstantFact(weakref.ref(tensor))
        return fact


class _ThreadFacts(threading.local):
    def __init__(self) -> None:
        self.facts = ConstantFacts()


_THREAD_FACTS = _ThreadFacts()


def constant_facts() -> ConstantFacts:
    """This thread's record."""
    return _THREAD_FACTS.facts
