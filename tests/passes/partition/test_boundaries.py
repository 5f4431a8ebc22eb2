"""Computed weights xnnfold must decline: declined visibly, and the program still correct.

Folding is only right when the folded tensor is the one the program would compute on every
call and storing it does not grow the program. Each case below breaks one of those
conditions (a source read elsewhere, a buffer the program writes, a larger folded tensor,
an op that is not a pure function, an external data file, an intermediate read elsewhere,
an earlier partitioner that took part of the graph). For each, the program lowers, the
`.pte` runs like eager (over several calls when there is state), it is no larger than the
stock partitioner's program, nothing declined is marked for folding, and both the WARNING
and `xnnfold.explain` name the GEMM's module path and the cause.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

import pytest
import torch
import torch.nn.functional as F
from executorch.backends.xnnpack.partition.config.gemm_configs import (
    AddmmConfig,
    LinearConfig,
)
from executorch.backends.xnnpack.partition.config.generic_node_configs import MulConfig
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import (
    EdgeProgramManager,
    ExecutorchBackendConfig,
    to_edge,
    to_edge_transform_and_lower,
)
from executorch.exir.backend.partitioner import Partitioner, PartitionResult
from executorch.exir.passes import MemoryPlanningPass
from executorch.exir.passes.external_constants_pass import (
    delegate_external_constants_pass_unlifted,
)
from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass
from executorch.runtime import Runtime
from torch import nn
from torch.fx import Node
from torch.nn.utils.parametrizations import spectral_norm, weight_norm

import xnnfold
from xnnfold._meta import FOLD_META_KEY
from xnnfold.passes import XnnpackFoldingPartitioner

# The full tier: the fast tier covers each rule in tests/passes/analysis and end to end once.
pytestmark = [pytest.mark.runtime, pytest.mark.slow]

PARTITIONER_LOGGER = "xnnfold.passes.partition._partitioner"
EXTERNAL_FILE = "model"


# --------------------------------------------------------------------------------------
# Models. Every GEMM under test is called from a named submodule, so its module path is
# something a message can be checked to contain.


@torch.library.custom_op("xnnfold_test::doubled", mutates_args=())
def doubled(w: torch.Tensor) -> torch.Tensor:
    return w * 2.0


@doubled.register_fake
def _(w: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(w)


class Logits(nn.Module):
    def forward(self, h: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        return h @ table.t()


class TiedEmbedding(nn.Module):
    """A language model head that reuses the embedding table: `h @ E.t()`."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.logits = Logits()

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.logits(self.emb(tokens), self.emb.weight)


class ElementwiseUse(nn.Module):
    """`W` is the GEMM's weight (through a transpose) and also read by an elementwise op."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x @ self.w.t()) * (self.w * self.w).mean()


class WeightNormGainReused(nn.Module):
    """weight_norm's magnitude also scales the output, outside the weight computation."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = weight_norm(nn.Linear(8, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * self.lin.parametrizations.weight.original0.mean()


class RunningScale(nn.Module):
    """The weight is scaled by a running statistic the forward updates after use."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.register_buffer("scale", torch.ones(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(x, self.lin.weight * self.scale, self.lin.bias)
        self.scale.mul_(0.5)
        return y


class KVAttention(nn.Module):
    """One decoding step: write k at `pos` into the cache, then `q @ cache.T`."""

    def __init__(self) -> None:
        super().__init__()
        self.q, self.k = nn.Linear(8, 8), nn.Linear(8, 8)
        self.register_buffer("cache", torch.zeros(6, 8))

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        self.cache.index_copy_(0, pos, self.k(x).detach())
        return torch.softmax(self.q(x) @ self.cache.t(), -1)


class LowRank(nn.Module):
    """`W = A @ B` with rank 2: 16 KiB folded from 1 KiB of parameters."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Parameter(torch.randn(64, 2))
        self.b = nn.Parameter(torch.randn(2, 64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.a @ self.b)


class CustomOpWeight(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, doubled(self.w))


class RandomOpWeight(nn.Module):
    """A random op in the weight computation (its value does not change the result)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.w + 0.0 * torch.rand(8, 8))


class SideEffectWeight(nn.Module):
    """The weight computation itself bumps a call counter in place."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 8))
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.w * self.calls.add_(1.0))


class CondWeight(nn.Module):
    """The weight is chosen by `torch.cond`, a higher-order op."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 8))
        self.register_buffer("flag", torch.ones(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = torch.cond(self.flag > 0, lambda w: w * 2.0, lambda w: w * 1.0, (self.w,))
        return F.linear(x, w)


class DirectionShared(nn.Module):
    """The normalised direction `v / |v|` feeds the conv weight and something else."""

    def __init__(self, into_activation: bool) -> None:
        super().__init__()
        self.into_activation = into_activation
        self.v = nn.Parameter(torch.randn(4, 4, 3))

    def forward(self, x: torch.Tensor) -> Any:
        d = self.v / self.v.norm()
        if self.into_activation:
            return F.conv1d(x * d.mean(), d * 2.0, padding=1)
        return F.conv1d(x, d * 2.0, padding=1), d


class ScaledWeight(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 8))
        self.s = nn.Parameter(torch.rand(8, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.w * self.s)


class WeightNormLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = weight_norm(nn.Linear(8, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x)


class Block(nn.Module):
    """Puts a model under the module path "block"."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.block = inner

    def forward(self, *args: torch.Tensor) -> Any:
        return self.block(*args)


def _x(step: int, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(100 + step))


# --------------------------------------------------------------------------------------
# The cases: lowered with [*first, XnnpackFoldingPartitioner()] and, for the size check,
# with [*first, XnnpackPartitioner()].


@dataclass(frozen=True)
class Case:
    build: Callable[[], nn.Module]
    inputs: Callable[[int], tuple[torch.Tensor, ...]]
    module: str  # the declined GEMM's module path
    cause: str  # a word of the reason
    stored: Callable[[nn.Module], Sequence[torch.Tensor]] = lambda m: ()
    steps: int = 1  # calls compared with eager (state carries over between them)
    train: bool = False
    prepare: bool = True
    mutable: tuple[str, ...] = ()  # buffers whose initial value the .pte must hold
    const_prop: bool = False
    first: Callable[[], list[Partitioner]] = field(default=list)


def _vec(step: int) -> tuple[torch.Tensor, ...]:
    return (_x(step, 3, 8),)


CASES: dict[str, Case] = {
    # A source parameter also used outside the weight computation.
    "tied_embedding": Case(
        TiedEmbedding,
        lambda s: (torch.randint(0, 50, (2, 5), generator=torch.Generator().manual_seed(s)),),
        "logits",
        "also used by",
        stored=lambda m: [m.emb.weight],
    ),
    "weight_also_in_elementwise_op": Case(
        lambda: Block(ElementwiseUse()),
        _vec,
        "block",
        "also used by",
        stored=lambda m: [m.block.w],
    ),
    "weight_norm_gain_also_scales_output": Case(
        lambda: Block(WeightNormGainReused()),
        _vec,
        "block.lin",
        "also used by",
        stored=lambda m: [m.block.lin.parametrizations.weight.original1],
    ),
    # A buffer the program writes.
    "training_spectral_norm": Case(
        lambda: Block(spectral_norm(nn.Linear(8, 8))),
        _vec,
        "block",
        "written by the program",
        stored=lambda m: [m.block.parametrizations.weight.original],
        steps=3,
        train=True,
        prepare=False,
        mutable=("_u", "_v"),
    ),
    "running_statistic": Case(
        lambda: Block(RunningScale()),
        _vec,
        "block",
        "written by the program",
        stored=lambda m: [m.block.lin.weight],
        steps=3,
        mutable=("scale",),
    ),
    "kv_cache": Case(
        lambda: Block(KVAttention()),
        lambda s: (_x(s, 1, 8), torch.tensor([s])),
        "block",
        "written by the program",
        steps=3,
        mutable=("cache",),
    ),
    # Folding would grow the program.
    "low_rank_weight": Case(
        lambda: Block(LowRank()),
        lambda s: (_x(s, 3, 64),),
        "block",
        "grow",
        stored=lambda m: [m.block.a, m.block.b],
    ),
    # Not a pure ATen op, or a higher-order op. The custom op has no ExecuTorch kernel,
    # so that program can only run once executorch's own constant propagation evaluates
    # it ahead of time, at the top level, outside any delegate (the same for stock).
    "custom_op": Case(
        lambda: Block(CustomOpWeight()),
        _vec,
        "block",
        "not a pure ATen op",
        const_prop=True,
    ),
    "random_op": Case(
        lambda: Block(RandomOpWeight()),
        _vec,
        "block",
        "random",
        stored=lambda m: [m.block.w],
    ),
    "op_with_side_effect": Case(
        lambda: Block(SideEffectWeight()),
        _vec,
        "block",
        "written by the program",
        stored=lambda m: [m.block.w],
        steps=3,
        mutable=("calls",),
    ),
    "higher_order_op": Case(
        lambda: Block(CondWeight()),
        _vec,
        "block",
        "not an ATen op",
        stored=lambda m: [m.block.w],
    ),
    # An intermediate that also feeds the activation or another output.
    "intermediate_is_also_an_output": Case(
        lambda: Block(DirectionShared(into_activation=False)),
        lambda s: (_x(s, 1, 4, 9),),
        "block",
        "intermediate",
        stored=lambda m: [m.block.v],
    ),
    "intermediate_also_feeds_the_activation": Case(
        lambda: Block(DirectionShared(into_activation=True)),
        lambda s: (_x(s, 1, 4, 9),),
        "block",
        "intermediate",
        stored=lambda m: [m.block.v],
    ),
    # An earlier partitioner declined the GEMM but delegated (part of) its weight.
    "weight_from_an_earlier_delegate": Case(
        lambda: Block(ScaledWeight()),
        _vec,
        "block",
        "earlier partitioner",
        stored=lambda m: [m.block.w],
        first=lambda: [XnnpackPartitioner(configs=[MulConfig])],
    ),
    "gemm_rejected_by_the_stock_partitioner_first": Case(
        lambda: Block(WeightNormLinear()),
        _vec,
        "block.lin",
        "earlier partitioner",
        stored=lambda m: [m.block.lin.parametrizations.weight.original1],
        first=lambda: [XnnpackPartitioner()],
    ),
}


def _fresh(case: Case) -> nn.Module:
    torch.manual_seed(0)
    model = case.build()
    return model.train() if case.train else model.eval()


def _lower(case: Case, last: Partitioner) -> tuple[EdgeProgramManager, bytes]:
    model = _fresh(case)
    if case.prepare:
        model = xnnfold.prepare_for_xnnpack(model)
    ep = torch.export.export(model, case.inputs(0))
    edge = to_edge_transform_and_lower(ep, partitioner=[*case.first(), last])
    config = ExecutorchBackendConfig(
        passes=[InitializedMutableBufferPass(list(case.mutable))],
        do_quant_fusion_and_const_prop=case.const_prop,
    )
    return edge, edge.to_executorch(config).buffer


# --------------------------------------------------------------------------------------
# Checks shared by every case.


def _as_tuple(value: Any) -> tuple[Any, ...]:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def _assert_runs_like_eager(
    method: Callable[[list[torch.Tensor]], list[Any]],
    reference: Callable[..., Any],
    inputs: Callable[[int], tuple[torch.Tensor, ...]],
    steps: int,
) -> None:
    for step in range(steps):
        args = inputs(step)
        with torch.no_grad():
            expected = _as_tuple(reference(*args))
        outputs = method(list(args))
        assert len(outputs) == len(expected)
        for out, ref in zip(outputs, expected):
            torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5, msg=f"call {step}")


def _all_nodes(edge: EdgeProgramManager, method: str = "forward") -> Iterator[Node]:
    """Nodes of the top-level program and of every delegate's (unfolded) program."""
    graph_module = edge.exported_program(method).graph_module
    for module in graph_module.modules():
        original = getattr(module, "original_module", None)
        if original is not None:
            yield from original.graph.nodes
    yield from graph_module.graph.nodes


def _assert_nothing_folded(edge: EdgeProgramManager, module: str, method: str = "forward") -> None:
    marked = [n.name for n in _all_nodes(edge, method) if FOLD_META_KEY in n.meta]
    assert not marked, f"marked for folding: {marked}"
    rows = [r for r in xnnfold.explain(edge).rows if r.method == method and r.module == module]
    assert rows, f"no GEMM of module '{module}' in {xnnfold.explain(edge)}"
    assert not any(r.folded for r in rows), rows


def _assert_stored(pte: bytes, tensors: Sequence[torch.Tensor]) -> None:
    for tensor in tensors:
        assert tensor.detach().contiguous().numpy().tobytes() in pte, (
            f"a source of shape {tuple(tensor.shape)} is not stored in the program"
        )


# XNNPACK's fully-connected ops take a weight computed at run time.
RUNTIME_WEIGHT_OPS = frozenset({"linear", "addmm", "mm"})


def _warnings(records: Sequence[logging.LogRecord]) -> list[str]:
    return [
        r.getMessage()
        for r in records
        if r.name == PARTITIONER_LOGGER and r.levelno == logging.WARNING
    ]


def _assert_reason_visible(
    edge: EdgeProgramManager,
    records: Sequence[logging.LogRecord],
    module: str,
    cause: str,
    method: str = "forward",
) -> None:
    """The GEMM's explain row carries the cause. A GEMM left on portable is also named
    in a WARNING; a linear/addmm/mm may instead be delegated with its weight computed
    at run time (not folded), which the row's reason says."""
    rows = [
        r
        for r in xnnfold.explain(edge).rows
        if r.method == method and r.module == module and r.computed and not r.folded
    ]
    assert rows, f"no unfolded computed GEMM of module '{module}': {xnnfold.explain(edge)}"
    assert all(cause in (r.reason or "") for r in rows), [r.reason for r in rows]
    outside = [r for r in rows if not r.delegated]
    if outside:
        warnings = _warnings(records)
        assert any(f"'{module}'" in m and cause in m for m in warnings), warnings
    else:
        assert all(r.op in RUNTIME_WEIGHT_OPS for r in rows), rows
        assert all("computed at run time, not folded" in (r.reason or "") for r in rows)


# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", CASES)
def test_declined_visibly_and_still_correct(name: str, caplog: pytest.LogCaptureFixture) -> None:
    case = CASES[name]
    with caplog.at_level(logging.WARNING, logger=PARTITIONER_LOGGER):
        edge, pte = _lower(case, XnnpackFoldingPartitioner())
    _, stock_pte = _lower(case, XnnpackPartitioner())

    program = xnnfold.LoadedProgram(pte)
    _assert_runs_like_eager(program, _fresh(case), case.inputs, case.steps)
    assert len(pte) <= len(stock_pte)
    _assert_nothing_folded(edge, case.module)
    _assert_stored(pte, case.stored(_fresh(case)))
    _assert_reason_visible(edge, caplog.records, case.module, case.cause)


# --------------------------------------------------------------------------------------
# A buffer written by another method of the same program.


class Gain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 8))
        self.register_buffer("gain", torch.ones(8, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.w * self.gain)


class Forward(nn.Module):
    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class SetGain(nn.Module):
    """A second method writing the buffer `forward` reads (same FQN: net.block.gain)."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, gain: torch.Tensor) -> torch.Tensor:
        self.net.block.gain.copy_(gain)
        return gain + 0.0


class SetU(nn.Module):
    """A second method writing spectral_norm's `_u`, which the eval forward only reads."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        self.net.block.parametrizations.weight[0]._u.copy_(u)
        return u + 0.0


def _spectral_net() -> nn.Module:
    return Block(spectral_norm(nn.Linear(8, 8))).eval()


def _lower_methods(
    build: Callable[[], nn.Module],
    writer: Callable[[nn.Module], nn.Module],
    written: torch.Tensor,
    make: Callable[[], Partitioner],
    *,
    writer_first: bool = False,
    per_method: bool = False,
    extra: Optional[Callable[[], Partitioner]] = None,
) -> tuple[EdgeProgramManager, bytes]:
    torch.manual_seed(0)
    net = xnnfold.prepare_for_xnnpack(build())
    programs = {
        "forward": torch.export.export(Forward(net), (_x(0, 3, 8),)),
        "write": torch.export.export(writer(net), (written,)),
    }
    if writer_first:
        programs = {"write": programs["write"], "forward": programs["forward"]}
    # One partitioner for all methods, or (per_method) one instance per method.
    partitioners: Any = {name: [make()] for name in programs} if per_method else [make()]
    if extra is not None:  # a second partitioner, after the first
        partitioners.append(extra())
    edge = to_edge_transform_and_lower(programs, partitioner=partitioners)
    config = ExecutorchBackendConfig(
        passes=[InitializedMutableBufferPass(["gain", "_u"])],
        memory_planning_pass=MemoryPlanningPass(share_mutable_buffers=True),
        emit_mutable_buffer_names=True,
    )
    return edge, edge.to_executorch(config).buffer


def _lower_two_methods(
    make: Callable[[], Partitioner], per_method: bool
) -> tuple[EdgeProgramManager, bytes]:
    return _lower_methods(
        lambda: Block(Gain()).eval(), SetGain, torch.ones(8, 1), make, per_method=per_method
    )


@pytest.mark.parametrize("per_method", [False, True], ids=["one_partitioner", "one_per_method"])
def test_buffer_written_by_another_method_is_not_folded(
    per_method: bool, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger=PARTITIONER_LOGGER):
        edge, pte = _lower_two_methods(XnnpackFoldingPartitioner, per_method)
    _, stock_pte = _lower_two_methods(XnnpackPartitioner, per_method)

    torch.manual_seed(0)
    reference = Block(Gain()).eval()
    program = Runtime.get().load_program(pte)
    forward, set_gain = program.load_method("forward"), program.load_method("write")
    _assert_runs_like_eager(forward.execute, reference, lambda s: (_x(s, 3, 8),), 1)
    gain = torch.linspace(-2.0, 3.0, 8).reshape(8, 1)
    set_gain.execute([gain])
    reference.block.gain.copy_(gain)
    # A folded `forward` would still compute with the gain it read at export time.
    _assert_runs_like_eager(forward.execute, reference, lambda s: (_x(s + 1, 3, 8),), 1)

    assert len(pte) <= len(stock_pte)
    _assert_nothing_folded(edge, "net.block")
    _assert_stored(pte, [reference.block.w])
    _assert_reason_visible(edge, caplog.records, "net.block", "another method")


class _LowersElsewhere(Partitioner):
    """Partitions nothing; while asked, another thread lowers two unrelated models with
    the folding partitioner (as a server exporting several models at once would)."""

    def __init__(self) -> None:
        super().__init__()
        self.ran = 0

    def partition(self, exported_program: Any) -> PartitionResult:
        def lower_twice() -> None:
            for _ in range(2):
                xnnfold.lower(_spectral_net(), (_x(0, 3, 8),))
                self.ran += 1

        thread = threading.Thread(target=lower_twice)
        thread.start()
        thread.join()
        return PartitionResult(tagged_exported_program=exported_program, partition_tags={})


def test_another_threads_lowerings_do_not_erase_which_buffers_are_written() -> None:
    interloper = _LowersElsewhere()
    edge, pte = _lower_methods(
        lambda: Block(Gain()).eval(),
        SetGain,
        torch.ones(8, 1),
        lambda: interloper,
        extra=XnnpackFoldingPartitioner,
    )
    assert interloper.ran == 4  # two lowerings while each of the two methods was partitioned
    torch.manual_seed(0)
    reference = Block(Gain()).eval()
    program = Runtime.get().load_program(pte)
    forward, write = program.load_method("forward"), program.load_method("write")
    gain = torch.linspace(-2.0, 3.0, 8).reshape(8, 1)
    write.execute([gain])
    reference.block.gain.copy_(gain)
    _assert_runs_like_eager(forward.execute, reference, lambda s: (_x(s + 1, 3, 8),), 1)
    _assert_nothing_folded(edge, "net.block")


def test_spectral_norm_buffer_written_by_a_method_listed_first(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # spectral_norm's fold keeps `mv`/`vdot` undecomposed; knowing the writer first, the
    # partitioner keeps nothing for a weight it will decline.
    u = torch.linspace(-1.0, 1.0, 8)
    with caplog.at_level(logging.WARNING, logger=PARTITIONER_LOGGER):
        edge, pte = _lower_methods(
            _spectral_net, SetU, u, XnnpackFoldingPartitioner, writer_first=True
        )
    _, stock_pte = _lower_methods(_spectral_net, SetU, u, XnnpackPartitioner, writer_first=True)

    torch.manual_seed(0)
    reference = _spectral_net()
    program = Runtime.get().load_program(pte)
    forward, write = program.load_method("forward"), program.load_method("write")
    _assert_runs_like_eager(forward.execute, reference, lambda s: (_x(s, 3, 8),), 1)
    write.execute([u])
    reference.block.parametrizations.weight[0]._u.copy_(u)
    _assert_runs_like_eager(forward.execute, reference, lambda s: (_x(s + 1, 3, 8),), 1)

    assert len(pte) <= len(stock_pte)
    _assert_nothing_folded(edge, "net.block")
    _assert_reason_visible(edge, caplog.records, "net.block", "another method")


def test_spectral_norm_buffer_written_by_a_method_listed_later_names_the_fix() -> None:
    # Known limit: ops kept undecomposed for `forward` cannot be taken back once a later
    # method turns out to write the buffer; the error says how to order the methods.
    with pytest.raises(RuntimeError, match="before the methods that read them"):
        _lower_methods(_spectral_net, SetU, torch.zeros(8), XnnpackFoldingPartitioner)


@pytest.mark.parametrize("how", ["writer_without_partitioner", "to_edge_then_to_backend"])
@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="known limit (docs/limits.md): xnnfold learns which buffers a method writes when "
    "to_edge_transform_and_lower asks it which ops to keep; a writer method it is never "
    "asked about, or a lowering through to_edge().to_backend(), goes unseen",
)
def test_a_writer_method_xnnfold_is_not_asked_about(how: str) -> None:
    torch.manual_seed(0)
    net = xnnfold.prepare_for_xnnpack(Block(Gain()).eval())
    programs = {
        "forward": torch.export.export(Forward(net), (_x(0, 3, 8),)),
        "write": torch.export.export(SetGain(net), (torch.ones(8, 1),)),
    }
    if how == "to_edge_then_to_backend":
        edge = to_edge(programs).to_backend(XnnpackFoldingPartitioner())
    else:
        edge = to_edge_transform_and_lower(
            programs, partitioner={"forward": [XnnpackFoldingPartitioner()]}
        )
    config = ExecutorchBackendConfig(
        passes=[InitializedMutableBufferPass(["gain"])],
        memory_planning_pass=MemoryPlanningPass(share_mutable_buffers=True),
        emit_mutable_buffer_names=True,
    )
    program = Runtime.get().load_program(edge.to_executorch(config).buffer)
    forward, write = program.load_method("forward"), program.load_method("write")
    torch.manual_seed(0)
    reference = Block(Gain()).eval()
    gain = torch.linspace(-2.0, 3.0, 8).reshape(8, 1)
    write.execute([gain])
    reference.block.gain.copy_(gain)
    _assert_runs_like_eager(forward.execute, reference, lambda s: (_x(s + 1, 3, 8),), 1)


# --------------------------------------------------------------------------------------
# A source tagged for an external .ptd data file.


def _lower_external(last: Partitioner, outdir: Path) -> tuple[EdgeProgramManager, bytes, Path]:
    torch.manual_seed(0)
    model = xnnfold.prepare_for_xnnpack(Block(WeightNormLinear()).eval())
    inputs = _vec(0)
    unlifted = torch.export.export(model, inputs).module()
    # How executorch tags delegate constants for a .ptd (as its llama export does) ...
    delegate_external_constants_pass_unlifted(unlifted, gen_tag_fn=lambda node: EXTERNAL_FILE)
    edge = to_edge_transform_and_lower(torch.export.export(unlifted, inputs), partitioner=[last])
    # ... and top-level constants, into the same file.
    et = edge.to_executorch(ExecutorchBackendConfig(external_constants=lambda node: EXTERNAL_FILE))
    outdir.mkdir()
    et.write_tensor_data_to_file(outdir)
    return edge, et.buffer, outdir / f"{EXTERNAL_FILE}.ptd"


@contextlib.contextmanager
def _method_with_data(
    pte: bytes, ptd: Path, tmp_path: Path
) -> Iterator[Callable[[list[torch.Tensor]], list[Any]]]:
    """``forward`` of a program whose constants live in ``ptd``.

    executorch 1.5 loads the pair with ``Runtime.load_program(..., data_path=)``; 1.4.1's
    Runtime has no ``data_path``, only the pybindings' path-based loader."""
    if "data_path" in inspect.signature(Runtime.load_program).parameters:
        program = Runtime.get().load_program(pte, data_path=ptd)  # the Method borrows it
        yield program.load_method("forward").execute
        return
    from executorch.extension.pybindings.portable_lib import _load_for_executorch

    path = tmp_path / "with_data.pte"
    path.write_bytes(pte)
    module = _load_for_executorch(str(path), str(ptd))
    yield lambda inputs: list(module.run_method("forward", tuple(inputs)))


def test_source_in_an_external_data_file_stays_there(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    with caplog.at_level(logging.WARNING, logger=PARTITIONER_LOGGER):
        edge, pte, ptd = _lower_external(XnnpackFoldingPartitioner(), tmp_path / "xnnfold")
    _, stock_pte, stock_ptd = _lower_external(XnnpackPartitioner(), tmp_path / "stock")

    torch.manual_seed(0)
    reference = Block(WeightNormLinear()).eval()
    with _method_with_data(pte, ptd, tmp_path) as forward:
        _assert_runs_like_eager(forward, reference, _vec, 1)

    assert len(pte) + ptd.stat().st_size <= len(stock_pte) + stock_ptd.stat().st_size
    _assert_nothing_folded(edge, "block.lin")
    direction = reference.block.lin.parametrizations.weight.original1
    # Still external, and nothing inlined: neither the source nor a folded weight.
    _assert_stored(ptd.read_bytes(), [direction])
    assert direction.detach().numpy().tobytes() not in pte
    assert reference.block.lin.weight.detach().numpy().tobytes() not in pte
    _assert_reason_visible(edge, caplog.records, "block.lin", "external data file")


# --------------------------------------------------------------------------------------
# A GEMM an earlier partitioner claimed: xnnfold never sees it and folds nothing.


def test_gemm_claimed_by_an_earlier_partitioner_is_left_to_it() -> None:
    def first() -> list[Partitioner]:
        # Takes fp32 linears whatever their weight, as run-time inputs of the delegate.
        return [
            XnnpackPartitioner(
                configs=[LinearConfig, AddmmConfig],
                force_non_static_weights_for_f32_linear=True,
            )
        ]

    case = Case(lambda: Block(WeightNormLinear()), _vec, "block.lin", "", first=first)
    edge, pte = _lower(case, XnnpackFoldingPartitioner())
    _, stock_pte = _lower(case, XnnpackPartitioner())

    _assert_runs_like_eager(xnnfold.LoadedProgram(pte), _fresh(case), _vec, 1)
    assert len(pte) <= len(stock_pte)
    _assert_nothing_folded(edge, "block.lin")
    (row,) = [r for r in xnnfold.explain(edge).rows if r.module == "block.lin"]
    assert row.delegated and not row.folded
