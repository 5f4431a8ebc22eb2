"""`CrossMethodFacts`, one lowering at a time, and the facts a partitioner built without one
shares: unit tests without lowering, then partitioners sharing facts end to end, and a
lowering after one that raised half way."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path
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
from xnnfold.passes.analysis import ProgramFacts, TableUses
from xnnfold.passes.partition._facts import facts_for_new_partitioner


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


def test_a_question_after_a_partition_starts_the_next_lowering() -> None:
    w, v = torch.randn(2), torch.randn(2)
    facts = CrossMethodFacts()
    facts.note_method({"w": w}, written={"w"}, stored=set())
    facts.start_partitioning()
    assert facts.of({"w": w}).written_buffers == {"w"}  # the lowering's facts stay in
    facts.note_method({"v": v}, written=set(), stored=set())
    assert not facts.partitioning
    assert facts.of({"w": w}) == ProgramFacts()


class _Program:
    """Stands for one method's ATen program: what `note_tables` tells methods by."""


def test_a_table_is_tied_across_methods_when_another_method_looks_it_up() -> None:
    emb, head = torch.randn(8, 4), torch.randn(8, 4)
    facts = CrossMethodFacts()
    facts.note_tables(
        {"emb": emb, "head": head},
        TableUses(looked_up=frozenset({"emb", "head"})),
        program=_Program(),
    )
    facts.note_tables(
        {"emb": emb}, TableUses(as_linear_weight=frozenset({"emb"})), program=_Program()
    )
    assert facts.tied_across_methods({"emb": emb, "head": head}) == {"emb"}


def test_a_table_two_methods_only_look_up_is_not_tied() -> None:
    emb = torch.randn(8, 4)
    facts = CrossMethodFacts()
    for _ in range(2):
        facts.note_tables({"emb": emb}, TableUses(looked_up=frozenset({"emb"})), program=_Program())
    assert facts.tied_across_methods({"emb": emb}) == frozenset()


def test_a_method_asked_about_twice_is_one_method() -> None:
    """executorch asks about each ATen program more than once."""
    head = torch.randn(8, 4)
    facts, program = CrossMethodFacts(), _Program()
    for _ in range(2):
        facts.note_tables({"head": head}, TableUses(frozenset({"head"})), program=program)
    assert facts.tied_across_methods({"head": head}) == frozenset()


class _Decomposed:
    """Stands for a program executorch decomposed from another: a new object that keeps
    the first one's example inputs, as ``run_decompositions`` does."""

    def __init__(self, source: Any) -> None:
        self.example_inputs = source.example_inputs


def test_a_decomposed_copy_of_a_method_s_program_is_the_same_method() -> None:
    head = torch.randn(8, 4)
    first = _Program()
    first.example_inputs = ((torch.randn(2, 4),), {})  # type: ignore[attr-defined]
    facts = CrossMethodFacts()
    for program in (first, _Decomposed(first)):
        facts.note_tables({"head": head}, TableUses(frozenset({"head"})), program=program)
    assert facts.tied_across_methods({"head": head}) == frozenset()


class _TwoLinears(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(8, 16), nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


@pytest.mark.runtime
def test_tying_with_nothing_tied_writes_stock_s_bytes_and_no_data_file(
    tmp_path: Path,
) -> None:
    """With a per-node filter, executorch asks about the method's decomposed program too:
    one method, nothing shared, so nothing is tied and the program is stock's."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.runtime import Runtime

    torch.manual_seed(0)
    model, x = _TwoLinears().eval(), torch.randn(2, 8)
    written = {}
    for label, partitioner in (
        ("stock", XnnpackPartitioner()),
        (
            "xnnfold",
            XnnpackFoldingPartitioner(
                tie_tables=True, keep_decomposition_filter=True, facts=CrossMethodFacts()
            ),
        ),
    ):
        edge = to_edge_transform_and_lower(
            torch.export.export(model, (x,)), partitioner=[partitioner]
        )
        (tmp_path / label).mkdir()
        written[label] = xnnfold.save(edge.to_executorch(), tmp_path / label / "model.pte")
    (stock,), ours = written["stock"], written["xnnfold"]
    assert [path.name for path in ours] == ["model.pte"]
    assert ours[0].read_bytes() == stock.read_bytes()
    program = Runtime.get().load_program(ours[0])  # the method borrows it
    (out,) = program.load_method("forward").execute([x])
    torch.testing.assert_close(out, model(x), rtol=1e-5, atol=1e-5)


def test_partitioners_built_in_a_row_share_their_facts() -> None:
    """The entries of a ``partitioner={...}`` dict are built before the lowering asks
    about any method: they must know what each other's methods do."""
    first, second = facts_for_new_partitioner(), facts_for_new_partitioner()
    assert first is second


def test_a_partitioner_built_after_a_question_starts_new_facts() -> None:
    """A lowering's partitioners never read an earlier lowering's facts, whether that
    lowering finished or raised before partitioning."""
    earlier = facts_for_new_partitioner()
    earlier.note_method({"w": torch.randn(2)}, written={"w"}, stored=set())
    later = facts_for_new_partitioner()
    assert later is not earlier and not later.asked


def test_each_thread_builds_its_own() -> None:
    here = facts_for_new_partitioner()
    there: list[CrossMethodFacts] = []
    thread = threading.Thread(target=lambda: there.append(facts_for_new_partitioner()))
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
    return edge, _emitted(edge)


def _emitted(edge: Any) -> bytes:
    """The ``.pte`` of ``edge`` with ``gain`` initialized and shared by its methods."""
    config = ExecutorchBackendConfig(
        passes=[InitializedMutableBufferPass(["gain"])],
        memory_planning_pass=MemoryPlanningPass(share_mutable_buffers=True),
        emit_mutable_buffer_names=True,
    )
    return edge.to_executorch(config).buffer


def _given_one_object() -> dict[str, list[XnnpackFoldingPartitioner]]:
    facts = CrossMethodFacts()
    return {
        "write": [XnnpackFoldingPartitioner(facts=facts)],
        "forward": [XnnpackFoldingPartitioner(facts=facts)],
    }


def _built_in_a_row() -> dict[str, list[XnnpackFoldingPartitioner]]:
    return {"write": [XnnpackFoldingPartitioner()], "forward": [XnnpackFoldingPartitioner()]}


@pytest.mark.runtime
@pytest.mark.parametrize("partitioners", [_given_one_object, _built_in_a_row])
def test_each_method_s_partitioner_knows_what_the_other_method_writes(
    partitioners: Any,
) -> None:
    from executorch.runtime import Runtime

    edge, pte = _lower(partitioners())
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


class _Other(nn.Module):
    """A method over another model of the same structure: its ``net.gain`` is another
    tensor under the same FQN."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.net = _Gain()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _Forward(self.net)(x)


@pytest.mark.runtime
def test_one_partitioner_knows_what_another_method_writes_under_a_shared_name() -> None:
    """One partitioner serves three methods; the last one asked names another tensor
    ``net.gain``: the reader's partition must still see that ``set_gain`` writes its own."""
    from executorch.runtime import Runtime

    net = _Gain().eval()
    programs = {
        "forward": torch.export.export(_Forward(net), (torch.randn(3, 8),)),
        "write": torch.export.export(_SetGain(net), (torch.ones(8, 1),)),
        "other": torch.export.export(_Other().eval(), (torch.randn(3, 8),)),
    }
    edge = to_edge_transform_and_lower(programs, partitioner=[XnnpackFoldingPartitioner()])
    program = Runtime.get().load_program(_emitted(edge))
    forward, write = program.load_method("forward"), program.load_method("write")
    gain = torch.linspace(-2.0, 3.0, 8).reshape(8, 1)
    write.execute([gain])
    x = torch.randn(3, 8)
    (out,) = forward.execute([x])
    with torch.no_grad():
        net.gain.copy_(gain)
        torch.testing.assert_close(out, _Forward(net)(x), rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------------------
# Same call, same program: a lowering after one that raised half way.

# Run here after a lowering that raises once every method was asked about, and in a fresh
# process alone: the forward method reads ``gain``, which only the failed lowering's
# other method writes.
_SCENARIO = textwrap.dedent(
    """
    import hashlib

    import torch
    import torch.nn.functional as F
    from executorch.exir import to_edge_transform_and_lower
    from torch import nn

    from xnnfold import XnnpackFoldingPartitioner


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.w = nn.Parameter(torch.randn(8, 8))
            self.register_buffer("gain", torch.full((8, 1), 2.0))


    class Forward(nn.Module):
        def __init__(self, net):
            super().__init__()
            self.net = net

        def forward(self, x):
            return F.linear(x, self.net.w * self.net.gain)


    class SetGain(Forward):
        def forward(self, gain):
            self.net.gain.copy_(gain)
            return gain + 0.0


    def good_lowering(net):
        ep = torch.export.export(Forward(net).eval(), (torch.randn(3, 8),))
        edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackFoldingPartitioner()])
        return hashlib.sha256(edge.to_executorch().buffer).hexdigest()
    """
)


class _Raise:
    """A transform pass that fails: after every method's ATen question, before any
    partition."""

    def __call__(self, graph_module: Any) -> Any:
        raise RuntimeError("a transform pass failed")


@pytest.mark.runtime
def test_a_lowering_after_one_that_raised_is_the_one_a_fresh_process_makes() -> None:
    scenario: dict[str, Any] = {}
    exec(compile(_SCENARIO, "<scenario>", "exec"), scenario)
    net = scenario["Net"]().eval()
    programs = {
        "write": torch.export.export(scenario["SetGain"](net), (torch.ones(8, 1),)),
        "forward": torch.export.export(scenario["Forward"](net), (torch.randn(3, 8),)),
    }
    with pytest.raises(Exception, match="_Raise"):
        to_edge_transform_and_lower(
            programs, partitioner=_built_in_a_row(), transform_passes=[_Raise()]
        )
    here = scenario["good_lowering"](net)

    fresh = subprocess.run(
        [sys.executable, "-c", _SCENARIO + "\nprint(good_lowering(Net().eval()))"],
        check=True,
        capture_output=True,
        text=True,
    )
    assert here == fresh.stdout.split()[-1]
