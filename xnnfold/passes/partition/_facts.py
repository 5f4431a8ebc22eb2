"""The cross-method facts: what the methods of one lowering do with each constant tensor.

A program's methods can share constant tensors: one method writes a buffer another reads
(``set_gain``), stores a table another multiplies by, or looks up a table another's
lm_head multiplies by. Folding a shared constant is only right, and only saves bytes,
when no method writes it and no method stores it anyway; a table looked up in one method
and multiplied by in another is stored once only when both methods tag it
(``tie_tables``). A dict of per-method partitioners gives each method its own
partitioner, so what one method does is known only through an object all of them share:
`CrossMethodFacts`.

The object serves one lowering at a time. It relies on the order in which
`to_edge_transform_and_lower` calls partitioners: it asks every method's partitioners for
``ops_to_not_decompose`` on the method's ATen program before it partitions any method
(``tests/passes/partition/test_call_order.py`` fails on a release that stops doing so). So each
ATen question adds its method's facts (`note_method`, `note_tables`), and by partition
time every method's facts are in; after lowering, executorch asks again on each edge
program (dialect ``EDGE``), which adds nothing. A question after a partition starts the
next lowering, with no facts: a recipe's partitioners serve several lowerings in turn.
Were executorch to partition a method before asking about the next one, the first method
would partition without the later methods' facts: it could fold a buffer a later method
writes.

Which object a partitioner uses: the one given (``XnnpackFoldingPartitioner(facts=...)``,
as `xnnfold.lower`, the ``xnnfold export`` command, the recipes and the transformers
integration give one per lowering), else the one it was built with (`facts_for_new_partitioner`):
partitioners built one after another in a thread, before any of them is asked about a
program, share one object (the entries of a ``partitioner={...}`` dict), and a partitioner
built after that starts a new one. So a lowering with new partitioners never reads the
facts of an earlier lowering, finished or not: an earlier lowering that raised half way
leaves its facts only to the partitioners it used.

Entries are keyed by the tensor's id and hold it weakly (a WeakSet would compare tensors
with ``==``), which also keeps one model's facts from declining another model's constant
of the same name.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field
from typing import AbstractSet, Mapping, Optional

import torch

from xnnfold.passes.analysis import ProgramFacts, TableUses

__all__ = ["ConstantFact", "CrossMethodFacts", "facts_for_new_partitioner"]


@dataclass
class ConstantFact:
    """What the methods of the lowering do with one constant tensor.

    ``weight_readers`` and ``lookup_readers`` are the methods (numbered in the order they
    were noted) that read it as a linear's own weight, and that only look it up
    (`TableUses`).
    """

    tensor: weakref.ref[torch.Tensor]
    written: bool = False
    stored: bool = False
    weight_readers: set[int] = field(default_factory=set)
    lookup_readers: set[int] = field(default_factory=set)

    @property
    def tied_across_methods(self) -> bool:
        """One method reads it as a linear's weight, and another as a linear's weight or
        by a lookup."""
        readers = self.weight_readers | self.lookup_readers
        return any(readers - {method} for method in self.weight_readers)


class CrossMethodFacts:
    """What the methods of one lowering do with the constant tensors they share.

    Every folding partitioner of a lowering reads and writes the same object. It takes
    the facts of each method while the methods are asked which ops to keep, and is read
    when each method partitions. The first question after a partition starts the next
    lowering: the facts of the last one are dropped.
    """

    def __init__(self) -> None:
        self._by_id: dict[int, ConstantFact] = {}
        self._partitioning = False
        self._methods: weakref.WeakKeyDictionary[object, int] = weakref.WeakKeyDictionary()
        self._by_inputs: dict[int, tuple[object, int]] = {}
        self._next_method = 0
        self._asked = False

    @property
    def partitioning(self) -> bool:
        """True once a method of the current lowering has partitioned."""
        return self._partitioning

    @property
    def asked(self) -> bool:
        """True once a method has been noted, in any lowering."""
        return self._asked

    def note_method(
        self,
        tensors: Mapping[str, torch.Tensor],
        *,
        written: AbstractSet[str],
        stored: AbstractSet[str],
    ) -> None:
        """Add what one method does with its constants: ``tensors`` by FQN, the FQNs it
        writes and those it stores whatever folds. After a partition, start the next
        lowering first."""
        self._start_lowering_if_done()
        for key in [k for k, fact in self._by_id.items() if fact.tensor() is None]:
            del self._by_id[key]
        for fqn, tensor in tensors.items():
            fact = self._fact(tensor)
            fact.written |= fqn in written
            fact.stored |= fqn in stored

    def note_tables(
        self, tensors: Mapping[str, torch.Tensor], uses: TableUses, *, program: object
    ) -> None:
        """Add how the method whose ATen program is ``program`` reads its tables
        (`table_uses`), ``tensors`` by FQN. After a partition, start the next lowering
        first.

        executorch may ask about one method more than once, and about a copy of its
        program it decomposed (`_method_of`): the method is told by the program, not by
        the call.
        """
        self._start_lowering_if_done()
        method = self._method_of(program)
        for fqn, tensor in tensors.items():
            if fqn in uses.as_linear_weight:
                self._fact(tensor).weight_readers.add(method)
            if fqn in uses.looked_up:
                self._fact(tensor).lookup_readers.add(method)

    def _method_of(self, program: object) -> int:
        """The number of the method whose ATen program is ``program``.

        executorch asks about a method's program, and where the partitioner gives a
        per-node filter, again about the program it decomposed from it: a new program
        object holding the same tensors. Counted as a second method, every linear weight
        would read as tied across methods and be written to a `.ptd`. torch's
        ``run_decompositions`` passes the program's example inputs on, and each
        ``torch.export`` call makes its own, so a program whose example inputs an earlier
        program of this lowering had is that program's method.
        """
        method = self._methods.get(program)
        if method is not None:
            return method
        inputs = getattr(program, "example_inputs", None)
        derived = self._by_inputs.get(id(inputs)) if inputs is not None else None
        if derived is not None and derived[0] is inputs:
            method = derived[1]
        else:
            # Counted, not the dict's length: an earlier method's program may be gone.
            method = self._next_method
            self._next_method += 1
            if inputs is not None:
                # Held (not copied) until the next lowering starts, so its id stays its.
                self._by_inputs[id(inputs)] = (inputs, method)
        self._methods[program] = method
        return method

    def start_partitioning(self) -> None:
        """A method of this lowering partitions: every method's facts are in."""
        self._partitioning = True

    def of(self, tensors: Mapping[str, torch.Tensor]) -> ProgramFacts:
        """The facts of one method's constants, ``tensors`` by FQN, as the decision
        ladder reads them."""
        written: set[str] = set()
        stored: set[str] = set()
        for fqn, fact in self._facts_of(tensors):
            if fact.written:
                written.add(fqn)
            if fact.stored:
                stored.add(fqn)
        return ProgramFacts(frozenset(written), frozenset(stored))

    def tied_across_methods(self, tensors: Mapping[str, torch.Tensor]) -> frozenset[str]:
        """The FQNs among ``tensors`` (one method's constants) of the tables one method of
        the lowering reads as a linear's own weight and another as a linear's weight or by
        a lookup: each copy holds the table's bytes, so all can be stored once."""
        return frozenset(fqn for fqn, fact in self._facts_of(tensors) if fact.tied_across_methods)

    def _facts_of(self, tensors: Mapping[str, torch.Tensor]) -> list[tuple[str, ConstantFact]]:
        found = []
        for fqn, tensor in tensors.items():
            fact = self._by_id.get(id(tensor))
            if fact is not None and fact.tensor() is tensor:
                found.append((fqn, fact))
        return found

    def _start_lowering_if_done(self) -> None:
        self._asked = True
        if self._partitioning:
            self._by_id.clear()
            self._methods.clear()
            self._by_inputs.clear()
            self._next_method = 0
            self._partitioning = False

    def _fact(self, tensor: torch.Tensor) -> ConstantFact:
        fact = self._by_id.get(id(tensor))
        if fact is None or fact.tensor() is not tensor:
            fact = self._by_id[id(tensor)] = ConstantFact(weakref.ref(tensor))
        return fact


class _Newest(threading.local):
    """The facts the partitioners built last in this thread share."""

    def __init__(self) -> None:
        self.facts: Optional[CrossMethodFacts] = None


_NEWEST = _Newest()


def facts_for_new_partitioner() -> CrossMethodFacts:
    """The `CrossMethodFacts` a partitioner built without one uses: the one the
    partitioners built before it in this thread share, until a method is noted in it;
    then a new one.

    So the partitioners of a ``partitioner={...}`` dict, built before the lowering asks
    about any method, share one object, and partitioners built for another lowering start
    with none of its facts.
    """
    newest = _NEWEST.facts
    if newest is None or newest.asked:
        newest = _NEWEST.facts = CrossMethodFacts()
    return newest
