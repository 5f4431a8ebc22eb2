"""The predicate's per-graph constant map and the fold pass's one-pass bookkeeping.

The constant map is one sweep per graph, cached; these tests check that the sweep agrees
with torch's own per-node helpers, that a stale cache can only decline a fold (never fold
something computed at run time), and that the fold pass, which now reads one snapshot of
the signature and rewrites it once, still removes every kind of source and yields a
program that runs like eager.
"""

from __future__ import annotations

import copy

import pytest
import torch
from executorch.exir import to_edge_transform_and_lower
from executorch.exir.delegate import executorch_call_delegate
from torch import nn
from torch._export.utils import is_buffer, is_lifted_tensor_constant, is_param
from torch.export import ExportedProgram
from torch.nn.utils.parametrizations import weight_norm

from xnnfold import (
    FoldComputedWeightsPass,
    prepare_for_xnnpack,
    run_pte,
    summarize,
    XnnpackFoldingPartitioner,
)
from xnnfold.passes import FoldOptions
from xnnfold.passes.analysis import (
    find_weight_computation,
    new_analysis_cache,
    Rejection,
    WeightComputation,
)
from xnnfold.passes.analysis._constants import constant_map

from tests.support.sweeps import count_sweeps

# The full tier: the fast tier covers each rule in tests/passes/analysis and end to end once.
pytestmark = pytest.mark.slow

LINEAR = torch.ops.aten.linear.default


LINEAR_ARGS = (1, 2)


class Inputs(nn.Module):
    """Parameters, a buffer, a lifted constant and an input."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.register_buffer("scale", torch.full((4,), 2.0))
        self.offset = torch.tensor([0.5])  # a plain tensor attribute: a lifted constant

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x) * self.scale + self.offset


def _weight_norm_linear_program() -> ExportedProgram:
    torch.manual_seed(0)
    model = prepare_for_xnnpack(weight_norm(nn.Linear(4, 4)).eval())
    return torch.export.export(model, (torch.randn(2, 4),))


def _user_input(ep: ExportedProgram) -> torch.fx.Node:
    (name,) = ep.graph_signature.user_inputs
    return next(n for n in ep.graph.nodes if n.name == name)


def _linear(ep: ExportedProgram) -> torch.fx.Node:
    return next(n for n in ep.graph.nodes if n.target is LINEAR)


class _Lowering:
    """The predicate's queries sharing one cache, as inside one partitioner's lowering."""

    def __init__(self) -> None:
        self.cache = new_analysis_cache()

    def find(self, gemm: torch.fx.Node, ep: ExportedProgram) -> object:
        return find_weight_computation(
            gemm, 1, ep, arg_positions=LINEAR_ARGS, options=FoldOptions(), cache=self.cache
        )


def test_sweep_classifies_inputs_like_torch_helpers() -> None:
    ep = torch.export.export(Inputs(), (torch.randn(2, 4),))
    mutated = set(ep.graph_signature.buffers_to_mutate.values())
    cmap = constant_map(ep, cache=None)
    placeholders = [n for n in ep.graph.nodes if n.op == "placeholder"]
    expected = {
        n.name: is_param(ep, n)
        or is_lifted_tensor_constant(ep, n)
        or (is_buffer(ep, n) and ep.graph_signature.inputs_to_buffers[n.name] not in mutated)
        for n in placeholders
    }
    assert {n.name: cmap.constant[n.name] for n in placeholders} == expected
    # Every kind is present, so the comparison covers each branch.
    assert sorted(expected.values()) == [False, True, True, True, True]


def test_predicate_sees_a_mutation_that_adds_a_node() -> None:
    ep = _weight_norm_linear_program()
    lowering = _Lowering()
    gemm = _linear(ep)
    assert isinstance(
        lowering.find(gemm, ep),
        WeightComputation,
    )
    root = gemm.args[1]
    x = _user_input(ep)
    source = root.args[0]
    with ep.graph.inserting_before(root):
        activation = ep.graph.call_function(torch.ops.aten.clone.default, (x,))
    activation.meta["val"] = x.meta["val"]
    root.replace_input_with(source, activation)
    result = lowering.find(gemm, ep)
    assert isinstance(result, Rejection) and not result.computed_from_constants


def test_stale_constant_map_cannot_fold_a_runtime_value() -> None:
    """Swapping an argument in place keeps the node count, so the cached map is stale:
    the predicate must still refuse, because the walked nodes are re-checked."""
    ep = _weight_norm_linear_program()
    lowering = _Lowering()
    gemm = _linear(ep)
    assert isinstance(
        lowering.find(gemm, ep),
        WeightComputation,
    )
    root = gemm.args[1]
    x = _user_input(ep)
    count = len(ep.graph.nodes)
    root.replace_input_with(root.args[0], x)
    assert len(ep.graph.nodes) == count
    assert constant_map(ep, cache=lowering.cache).constant[root.name]  # cached, stale
    result = lowering.find(gemm, ep)
    assert isinstance(result, Rejection)
    assert not result.computed_from_constants
    assert f"'{x.name}' is not a constant" in result.reason


def test_stale_constant_map_cannot_fold_an_impure_op() -> None:
    ep = _weight_norm_linear_program()
    lowering = _Lowering()
    gemm = _linear(ep)
    assert isinstance(
        lowering.find(gemm, ep),
        WeightComputation,
    )
    root = gemm.args[1]
    assert root.target is torch.ops.aten._weight_norm.default
    root.target = torch.ops.aten.normal.Tensor_Tensor  # random, same node count
    root.args = tuple(root.args[:2])
    result = lowering.find(gemm, ep)
    assert isinstance(result, Rejection) and "random" in result.reason


class SourceKinds(nn.Module):
    """Conv weights computed from a parameter, a persistent buffer, a non-persistent buffer
    and a lifted constant, plus a chain of weight_norm convs: one delegate folds them all."""

    def __init__(self, chain: int = 6) -> None:
        super().__init__()
        self.base = nn.Parameter(torch.randn(8, 8, 3))
        self.register_buffer("gain", torch.rand(8, 1, 1) + 0.5)
        self.register_buffer("shift", torch.rand(8, 1, 1), persistent=False)
        self.bias_scale = torch.tensor(0.25)
        self.bias = nn.Parameter(torch.randn(8))
        self.convs = nn.ModuleList(weight_norm(nn.Conv1d(8, 8, 3, padding=1)) for _ in range(chain))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.base * self.gain + self.shift
        x = nn.functional.conv1d(x, weight, self.bias * self.bias_scale, padding=1)
        for conv in self.convs:
            x = nn.functional.leaky_relu(conv(x), 0.1)
        return x


@pytest.fixture(scope="module")
def lowered_source_kinds():
    torch.manual_seed(1)
    model = SourceKinds().eval()
    inputs = (torch.randn(1, 8, 20),)
    ep = torch.export.export(prepare_for_xnnpack(model), inputs)
    edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackFoldingPartitioner()])
    return model, inputs, edge


@pytest.mark.runtime
def test_every_source_kind_folds_and_runs_like_eager(lowered_source_kinds) -> None:
    model, inputs, edge = lowered_source_kinds
    summary = summarize(edge)
    assert summary.delegates == 1 and summary.outside_ops_text() == "none"
    (actual,) = run_pte(edge.to_executorch().buffer, inputs)
    with torch.no_grad():
        expected = model(*inputs)
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.runtime
def test_fold_pass_removes_every_source_kind_in_one_signature(lowered_source_kinds) -> None:
    _, _, edge = lowered_source_kinds
    gm = edge.exported_program().graph_module
    (call,) = [n for n in gm.graph.nodes if n.target is executorch_call_delegate]
    ep = copy.deepcopy(getattr(gm, call.args[0].target).original_module)
    sources = {"base", "gain", "shift", "bias_scale", "bias"}
    assert sources <= {
        *ep.graph_signature.inputs_to_parameters.values(),
        *ep.graph_signature.inputs_to_buffers.values(),
        *ep.graph_signature.inputs_to_lifted_tensor_constants.values(),
    }
    assert FoldComputedWeightsPass(ep)(ep.graph_module).modified
    stored = set(ep.state_dict) | set(ep.constants)
    assert not sources & stored
    assert not any(k.endswith(("original0", "original1")) for k in stored)
    placeholders = [n.name for n in ep.graph.nodes if n.op == "placeholder"]
    assert placeholders == [s.arg.name for s in ep.graph_signature.input_specs]
    for spec in ep.graph_signature.input_specs:
        if spec.target is not None:
            assert spec.target in stored


def test_a_query_fills_only_the_cache_it_is_given() -> None:
    ep = _weight_norm_linear_program()
    given, other = new_analysis_cache(), new_analysis_cache()
    constant_map(ep, cache=given)
    assert ep in given and ep not in other
    constant_map(ep, cache=None)
    assert ep not in other


def test_two_partitioners_do_not_share_constant_maps() -> None:
    first, second = XnnpackFoldingPartitioner(), XnnpackFoldingPartitioner()
    ep = _weight_norm_linear_program()
    first.ops_to_not_decompose(ep)
    assert ep in first._analysis and ep not in second._analysis


@pytest.fixture
def sweeps(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    return count_sweeps(monkeypatch)


class _ManyGemms(nn.Module):
    """Six weight_norm linears: the decomposition filter asks the configs about each."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(*[weight_norm(nn.Linear(8, 8)) for _ in range(6)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


@pytest.mark.runtime
@pytest.mark.parametrize("keep_filter", [False, True])
def test_one_lowering_sweeps_each_graph_once(keep_filter: bool, sweeps: list[int]) -> None:
    """Every query of one of executorch's calls, the filter executorch calls after
    ops_to_not_decompose returned included, reads that call's cached maps: one sweep per
    question (the ATen program asked for its ops and again whether it gives a filter, the
    program decomposed with that filter, the edge program, the delegate's copy), not one
    per GEMM (six here)."""
    torch.manual_seed(0)
    model = prepare_for_xnnpack(_ManyGemms().eval())
    ep = torch.export.export(model, (torch.randn(2, 8),))
    partitioner = XnnpackFoldingPartitioner(keep_decomposition_filter=keep_filter)
    edge = to_edge_transform_and_lower(ep, partitioner=[partitioner])
    edge.to_executorch()
    assert summarize(edge).fully_delegated
    assert 1 <= len(sweeps) <= 5, sweeps


def test_a_query_given_no_cache_sweeps_the_graph_once(sweeps: list[int]) -> None:
    """A user calling the predicate directly pays one sweep per call, not one per lookup."""
    ep = _weight_norm_linear_program()
    result = find_weight_computation(
        _linear(ep), 1, ep, arg_positions=LINEAR_ARGS, options=FoldOptions()
    )
    assert isinstance(result, WeightComputation)
    assert len(sweeps) == 1
