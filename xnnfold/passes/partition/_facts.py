"""The cross-method facts: what the methods of one lowering do with each constant tensor.

A program's methods can share constant tensors: one method writes a buffer another reads
(``set_gain``), or stores a table another multiplies by. Folding a shared constant is only
right, and only saves bytes, when no method writes it and no method stores it anyway; a
dict of per-method partitioners gives each method its own partitioner, so what one method
does is known only through an object all of them share: `CrossMethodFacts`, one per
lowering. xnnfold's own entry points (`xnnfold.lower`, `xnnfold.to_executorch`, the
``xnnfold export`` command, the recipes and the transformers integration) build one where
the lowering starts and hand it to every partitioner they make
(``XnnpackFoldingPartitioner(facts=...)``). A partitioner built without one uses its
thread's default (`default_facts`), which is replaced by a new object once the lowering
it served has partitioned.

The object relies on the order in which `to_edge_transform_and_lower` calls partitioners:
it asks every method's partitioners for ``ops_to_not_decompose`` on the method's ATen
program before it partitions any method (``tests/partition/test_call_order.py`` fails on
a release that stops doing so). So each ATen question adds its method's facts
(`CrossMethodFacts.note_method`), and by partition time every method's facts are in;
after lowering, executorch asks again on each edge program (dialect ``EDGE``), which adds
nothing. Were executorch to partition a method before asking about the next one, the
first method would partition without the later methods' facts: it could fold a buffer a
later method writes. Entries are keyed by the tensor's id and hold it weakly (a WeakSet
would compare tensors with ``==``), which also keeps one model's facts from declining
another model's constant of the same name.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import AbstractSet, Mapping

import torch

from xnnfold.passes.analysis import ProgramFacts

__all__ = ["ConstantFact", "CrossMethodFacts", "default_facts"]


@dataclass
class ConstantFact:
    """What the methods of the lowering do with one constant tensor."""

    tensor: weakref.ref[torch.Tensor]
    written: bool = False
    stored: bool = False


class CrossMethodFacts:
    """What the methods of one lowering do with the constant tensors they share.

    Every folding partitioner of the lowering is given the same object. It takes the
    facts of each method while the methods are asked which ops to keep, and is read when
    each method partitions; after the first partition it takes no new method (a new
    lowering needs a new object).
    """

    def __init__(self) -> None:
        self._by_id: dict[int, ConstantFact] = {}
        self._partitioning = False

    @property
    def partitioning(self) -> bool:
        """True once a method of this lowering has partitioned."""
        return self._partitioning

    def note_method(
        self,
        tensors: Mapping[str, torch.Tensor],
        *,
        written: AbstractSet[str],
        stored: AbstractSet[str],
    ) -> None:
        """Add what one method does with its constants: ``tensors`` by FQN, the FQNs it
        writes and those it stores whatever folds."""
        if self._partitioning:
            raise RuntimeError(
                "xnnfold: this CrossMethodFacts has served a lowering that partitioned "
                "already; build a new CrossMethodFacts (and new partitioners) for each "
                "lowering"
            )
        for key in [k for k, fact in self._by_id.items() if fact.tensor() is None]:
            del self._by_id[key]
        for fqn, tensor in tensors.items():
            fact = self._fact(tensor)
            fact.written |= fqn in written
            fact.stored |= fqn in stored

    def start_partitioning(self) -> None:
        """A method of this lowering partitions: every method's facts are in."""
        self._partitioning = True

    def of(self, tensors: Mapping[str, torch.Tensor]) -> ProgramFacts:
        """The facts of one method's constants, ``tensors`` by FQN, as the decision
        ladder reads them."""
        written: set[str] = set()
        stored: set[str] = set()
        for fqn, tensor in tensors.items():
            fact = self._by_id.get(id(tensor))
            if fact is None or fact.tensor() is not tensor:
                continue
            if fact.written:
                written.add(fqn)
            if fact.stored:
                stored.add(fqn)
        return ProgramFacts(frozenset(written), frozenset(stored))

    def _fact(self, tensor: torch.Tensor) -> ConstantFact:
        fact = self._by_id.get(id(tensor))
        if fact is None or fact.tensor() is not tensor:
            fact = self._by_id[id(tensor)] = ConstantFact(weakref.ref(tensor))
        return fact


class _ThreadDefault(threading.local):
    def __init__(self) -> None:
        self.facts = CrossMethodFacts()


_DEFAULT = _ThreadDefault()


def default_facts(*, for_a_question: bool) -> CrossMethodFacts:
    """This thread's default `CrossMethodFacts`, for partitioners built without one.

    ``for_a_question``: an ATen program is being asked about. Once the default's lowering
    has partitioned, such a question starts the next lowering, with a new object.
    """
    if for_a_question and _DEFAULT.facts.partitioning:
        _DEFAULT.facts = CrossMethodFacts()
    return _DEFAULT.facts
