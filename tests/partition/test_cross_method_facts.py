"""`CrossMethodFacts`, one object per lowering, and the thread's default holder: unit tests
without lowering, then the explicit object shared by a dict of partitioners, end to end."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower
from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass
from executorch.exir.passes.memory_planning_pass import MemoryPlanningPass
from torch import nn

import xnnfold
from xnnfold.passes import CrossMethodFacts, XnnpackFoldingPartitioner
from xnnfold.passes.analysis import ProgramFacts
from xnnfold.passes.partition._facts import default_facts


def test_a_method_s_writes_and_stored_constants_are_read_back_by_fqn() -> None:
    table, gain = torch.randn(4, 2), torch.ones(2)
    facts = CrossMethodFacts()
    facts.note_method({"t": table, "g": gain}, written={"g"}, stored={"t"})
    assert facts.of({"t": table, "g": gain}) == ProgramFacts(
        written_buffers=frozenset({"g"}), stored_elsewhere=frozenset({"t"})
    )


def test_facts_follow_the_tensor_not_its_name() -> None:
    """Two methods may name one tensor differently, and two models one name for two
    tensors: the facts belong to the tensor."""
    shared, other = torch.randn(4), torch.randn(4)
    facts = CrossMethodFacts()
    facts.note_method({"enc.w": shared}, written=set(), stored={"enc.w"})
    assert facts.of({"dec.w": shared}).stored_elsewhere == {"dec.w"}
    assert facts.of({"enc.w": other}) == ProgramFacts()


def test_facts_of_several_methods_accumulate() -> None:
    w = torch.randn(4)
    facts = CrossMethodFacts()
    facts.note_method({"w": w}, written={"w"}, stored=set())
    facts.note_method({"w": w}, written=set(), stored={"w"})
    assert facts.of({"w": w}) == ProgramFacts(frozenset({"w"}), frozenset({"w"}))


def test_a_lowering_that_partitioned_takes_no_new_method() -> None:
    facts = CrossMethodFacts()
    facts.start_partitioning()
    with pytest.raises(RuntimeError, match="build a new CrossMethodFacts"):
        facts.note_method({"w": torch.randn(2)}, written=set(), stored=set())


def test_the_default_is_replaced_by_a_question_after_a_partition_only() -> None:
    first = default_facts(for_a_question=True)
    assert default_facts(for_a_question=True) is first
    first.start_partitioning()
    # executorch's questions after lowering, and a partition, keep the lowering's object.
    assert default_facts(for_a_question=False) is first
    second = default_facts(for_a_question=True)
    assert second is not first and not second.partitioning


def test_each_thread_has_its_own_default() -> None:
    here = default_facts(for_a_question=True)
    there: list[CrossMethodFacts] = []
    thread = threading.Thread(target=lambda: there.append(default_facts(for_a_question=True)))
    thread.start()
    thread.join()
    assert there and there[0] is not here


def test_a_partitioner_used_from_a_second_thread_refuses() -> None:
    partitioner = XnnpackFoldingPartitioner()
    ep = torch.export.export(nn.Linear(4, 4).eval(), (torch.randn(2, 4),))
    partitioner.ops_to_not_decompose(ep)
    errors: list[BaseException] = []

    def ask() -> None:
        try:
            partitioner.ops_to_not_decompose(ep)
        except RuntimeError as error:
            errors.append(error)

    thread = threading.Thread(target=ask)
    thread.start()
    thread.join()
    assert errors and "one partitioner per thread" in str(errors[0])


# --------------------------------------------------------------------------------------
# An explicit object, shared by the partitioners of one lowering.


class _Gain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.w = nn.Parameter(torch.randn(8, 8))
        self.register_buffer("gain", torch.ones(8, 1))


class _Forward(nn.Module):
    def __init__(self, net: _Gain) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.net.w * self.net.gain)


class _SetGain(nn.Module):
    def __init__(self, net: _Gain) -> None:
        super().__init__()
        self.net = net

    def forward(self, gain: torch.Tensor) -> torch.Tensor:
        self.net.gain.copy_(gain)
        return gain + 0.0


def _lower(partitioners: dict[str, list[XnnpackFoldingPartitioner]]) -> tuple[Any, bytes]:
    net = _Gain().eval()
    # The writer first: the reader's plan then already knows the buffer is written.
    programs = {
        "write": torch.export.export(_SetGain(net), (torch.ones(8, 1),)),
        "forward": torch.export.export(_Forward(net), (torch.randn(3, 8),)),
    }
    edge = to_edge_transform_and_lower(programs, partitioner=partitioners)
    config = ExecutorchBackendConfig(
        passes=[InitializedMutableBufferPass(["gain"])],
        memory_planning_pass=MemoryPlanningPass(share_mutable_buffers=True),
        emit_mutable_buffer_names=True,
    )
    return edge, edge.to_executorch(config).buffer


@pytest.mark.runtime
def test_partitioners_given_one_object_know_what_the_other_method_writes() -> None:
    from executorch.runtime import Runtime

    facts = CrossMethodFacts()
    edge, pte = _lower(
        {
            "write": [XnnpackFoldingPartitioner(facts=facts)],
            "forward": [XnnpackFoldingPartitioner(facts=facts)],
        }
    )
    (row,) = [r for r in xnnfold.explain(edge).rows if r.method == "forward"]
    assert row.folded == () and "another method" in (row.reason or "")

    program = Runtime.get().load_program(pte)  # the methods borrow it
    forward, write = program.load_method("forward"), program.load_method("write")
    torch.manual_seed(0)
    reference = _Gain().eval()
    gain = torch.linspace(-2.0, 3.0, 8).reshape(8, 1)
    write.execute([gain])
    reference.gain.copy_(gain)
    x = torch.randn(3, 8)
    (out,) = forward.execute([x])
    torch.testing.assert_close(out, _Forward(reference)(x), rtol=1e-5, atol=1e-5)
