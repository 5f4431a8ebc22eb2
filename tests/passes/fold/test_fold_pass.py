"""FoldComputedWeightsPass on a delegate's program: applies, idempotent, leaves others alone."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest
import torch
from executorch.exir import to_edge_transform_and_lower
from executorch.exir.delegate import executorch_call_delegate
from torch import nn
from torch.export import ExportedProgram
from torch.nn.utils.parametrizations import weight_norm

from xnnfold import (
    CrossMethodFacts,
    FoldComputedWeightsPass,
    prepare_for_xnnpack,
    XnnpackFoldingPartitioner,
)
from xnnfold._meta import FOLD_META_KEY
from xnnfold.passes import FoldOptions
from xnnfold.passes._marks import fold_mark_of, FoldMark
from xnnfold.passes.fold._placeholders import ConstantPlaceholders

from tests._lowering import fixture_by_name, lower_stock, lowered_folding

CASES = [
    "weight_norm_dim0-conv1d",
    "spectral_norm-linear",
    "legacy_spectral_norm-conv_transpose2d",
    "linear_computed_bias",
    "matmul_transposed",
]


def _delegate_program(lowered_edge) -> ExportedProgram:
    gm = lowered_edge.exported_program().graph_module
    (call,) = [n for n in gm.graph.nodes if n.target is executorch_call_delegate]
    # original_module is the delegate's program before preprocess: work on a copy, the
    # way executorch hands it to preprocess.
    return copy.deepcopy(getattr(gm, call.args[0].target).original_module)


def _call_functions(ep: ExportedProgram) -> list[str]:
    return [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]


@pytest.mark.runtime
@pytest.mark.parametrize("name", CASES)
def test_folds_the_marked_computation(name: str) -> None:
    ep = _delegate_program(lowered_folding(name).edge)
    before = len(_call_functions(ep))
    result = FoldComputedWeightsPass(ep)(ep.graph_module)
    assert result.modified
    assert len(_call_functions(ep)) < before
    assert not any(FOLD_META_KEY in n.meta for n in ep.graph.nodes)
    assert not any(
        "original" in k or k.endswith(("weight_g", "weight_v", "weight_orig"))
        for k in ep.state_dict
    )


@pytest.mark.runtime
def test_folded_weight_is_bitwise_the_eager_weight() -> None:
    ep = _delegate_program(lowered_folding("weight_norm_dim2-conv1d").edge)
    FoldComputedWeightsPass(ep)(ep.graph_module)
    (folded,) = [v for k, v in ep.state_dict.items() if k.startswith("xnnfold_")]
    eager = fixture_by_name("weight_norm_dim2-conv1d").model().weight
    assert torch.equal(folded, eager)


@pytest.mark.runtime
@pytest.mark.parametrize("name", CASES)
def test_second_run_reports_unmodified(name: str) -> None:
    ep = _delegate_program(lowered_folding(name).edge)
    FoldComputedWeightsPass(ep)(ep.graph_module)
    graph_before = str(ep.graph)
    assert not FoldComputedWeightsPass(ep)(ep.graph_module).modified
    assert str(ep.graph) == graph_before


@pytest.mark.runtime
def test_leaves_an_unmarked_program_alone() -> None:
    fixture = fixture_by_name("weight_norm_dim0-conv1d")
    stock = lower_stock(fixture.hand_folded(), fixture.inputs())
    ep = _delegate_program(stock.edge)
    graph_before, state_before = str(ep.graph), dict(ep.state_dict)
    assert not FoldComputedWeightsPass(ep)(ep.graph_module).modified
    assert str(ep.graph) == graph_before and dict(ep.state_dict).keys() == state_before.keys()


@pytest.mark.runtime
def test_ignores_a_hand_made_mark_on_an_unfoldable_argument() -> None:
    """A mark alone never folds: the argument must pass the shared predicate here too."""
    ep = _delegate_program(lowered_folding("weight_norm_dim0-conv1d").edge)
    gemm = next(n for n in ep.graph.nodes if FOLD_META_KEY in n.meta)
    gemm.meta[FOLD_META_KEY] = FoldMark(FoldOptions(), arguments=((0, None),))  # the activation
    graph_before = str(ep.graph)
    assert not FoldComputedWeightsPass(ep)(ep.graph_module).modified
    assert str(ep.graph) == graph_before


@pytest.mark.runtime
def test_rechecks_with_the_options_the_partitioner_marked() -> None:
    edge = lowered_folding("weight_norm_dim0-conv1d").edge
    ep = _delegate_program(edge)
    gemm = next(n for n in ep.graph.nodes if FOLD_META_KEY in n.meta)
    mark = fold_mark_of(gemm)
    assert mark is not None and mark.options == FoldOptions()
    # A computation over the marked options' limit is declined, and loudly: left
    # unfolded, it would reach the XNNPACK serializer.
    gemm.meta[FOLD_META_KEY] = dataclasses.replace(mark, options=FoldOptions(max_fold_nodes=1))
    with pytest.raises(RuntimeError, match="more than 1 nodes"):
        FoldComputedWeightsPass(ep)(ep.graph_module)


def _add_reader(ep: ExportedProgram, value: torch.fx.Node) -> None:
    """Give ``value`` one more reader in the delegate program, outside any computation."""
    from executorch.exir.dialects._ops import ops as exir_ops

    with ep.graph.inserting_after(value):
        ep.graph.call_function(exir_ops.edge.aten.neg.default, (value,))


def _marked_weight_computation(ep: ExportedProgram):
    from xnnfold.passes.analysis import find_weight_computation

    gemm = next(n for n in ep.graph.nodes if FOLD_META_KEY in n.meta)
    mark = fold_mark_of(gemm)
    assert mark is not None
    (index,) = mark.folded
    computation = find_weight_computation(
        gemm, index, ep, arg_positions=(1, 2), options=mark.options
    )
    return computation


@pytest.mark.runtime
def test_folds_a_marked_computation_whose_source_another_delegate_node_reads() -> None:
    """A source read in the delegate by a node the partitioner did not mark (a weight
    computed there at run time) stays for that reader; the marked fold still happens."""
    ep = _delegate_program(lowered_folding("weight_norm_dim0-conv1d").edge)
    computation = _marked_weight_computation(ep)
    _add_reader(ep, computation.sources[0])
    assert FoldComputedWeightsPass(ep)(ep.graph_module).modified
    assert computation.sources[0].name in {n.name for n in ep.graph.nodes}


@pytest.mark.runtime
def test_declines_loudly_a_marked_computation_whose_intermediate_is_read_elsewhere() -> None:
    """An intermediate another node reads would stay in the delegate, computed by ops no
    XNNPACK config checked: never emitted, the lowering fails with the reason."""
    ep = _delegate_program(lowered_folding("spectral_norm-linear").edge)
    computation = _marked_weight_computation(ep)
    intermediate = next(n for n in computation.nodes if n is not computation.root)
    _add_reader(ep, intermediate)
    with pytest.raises(RuntimeError, match="also used by"):
        FoldComputedWeightsPass(ep)(ep.graph_module)


@pytest.mark.runtime
def test_frees_a_source_once_its_last_reader_is_folded(monkeypatch: pytest.MonkeyPatch) -> None:
    """The delegate's sources are dropped fold by fold, not all at the end: the sources
    and the folded weights of a large delegate never sit in memory together."""
    torch.manual_seed(0)
    model = nn.Sequential(weight_norm(nn.Linear(4, 4)), weight_norm(nn.Linear(4, 4)))
    exported = torch.export.export(prepare_for_xnnpack(model.eval()), (torch.randn(2, 4),))
    edge = to_edge_transform_and_lower(
        exported, partitioner=[XnnpackFoldingPartitioner(facts=CrossMethodFacts())]
    )
    ep = _delegate_program(edge)
    held: list[int] = []
    real = ConstantPlaceholders.add

    def add(self: ConstantPlaceholders, **kwargs: Any) -> torch.fx.Node:
        held.append(sum("original" in key for key in self.ep.state_dict))
        return real(self, **kwargs)

    monkeypatch.setattr(ConstantPlaceholders, "add", add)
    assert FoldComputedWeightsPass(ep)(ep.graph_module).modified
    # Each linear's weight reads its own g and v: the second fold finds the first's gone.
    assert held == [4, 2]
