"""`AnalysisCache`: the per-program sweeps reach a query only as an argument, for a stage.

The partitioner starts a cache at each of executorch's calls and hands it to every query
it asks, the configs it builds among them; executorch calls the decomposition filter after
``ops_to_not_decompose`` returned, and the configs that filter asks still hold that call's
cache. The next call sweeps anew, so it sees an edit made in between.
"""

from __future__ import annotations

import pytest
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from torch import nn
from torch.export import ExportedProgram
from torch.nn.utils.parametrizations import weight_norm

from xnnfold import CrossMethodFacts, prepare_for_xnnpack, XnnpackFoldingPartitioner
from xnnfold.passes import FoldOptions
from xnnfold.passes.analysis import find_weight_computation, new_analysis_cache
from xnnfold.passes.analysis._constants import constant_map

from tests.support.sweeps import count_sweeps

LINEAR = torch.ops.aten.linear.default


@pytest.fixture
def sweeps(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    return count_sweeps(monkeypatch)


def _weight_norm_linears() -> ExportedProgram:
    torch.manual_seed(0)
    model = nn.Sequential(weight_norm(nn.Linear(4, 4)), weight_norm(nn.Linear(4, 4)))
    return torch.export.export(prepare_for_xnnpack(model.eval()), (torch.randn(2, 4),))


def test_the_filter_executorch_calls_later_reads_the_partitioners_cache(
    sweeps: list[int],
) -> None:
    ep = _weight_norm_linears()
    partitioner = XnnpackFoldingPartitioner(
        facts=CrossMethodFacts(), keep_decomposition_filter=True
    )
    _, filter_fn = partitioner.ops_to_not_decompose(ep)
    assert filter_fn is not None and ep in partitioner._analysis
    asked = len(sweeps)
    kept = [node.name for node in ep.graph.nodes if filter_fn(node)]
    # The filter's configs judged both computed weights (and kept the linears) from the
    # sweep the partitioner made while answering: a config without the cache sweeps again.
    assert [n for n in kept if n.startswith("linear")] == ["linear", "linear_1"]
    assert len(sweeps) == asked


def test_a_query_keeps_its_sweep_in_the_cache_it_is_given(sweeps: list[int]) -> None:
    ep = _weight_norm_linears()
    gemm = next(n for n in ep.graph.nodes if n.target is LINEAR)
    cache = new_analysis_cache()
    for _ in range(2):
        find_weight_computation(
            gemm, 1, ep, arg_positions=(1, 2), options=FoldOptions(), cache=cache
        )
    assert len(sweeps) == 1
    assert constant_map(ep, cache=cache) is cache[ep]
    assert len(sweeps) == 1


def _weight_norm_linear() -> ExportedProgram:
    torch.manual_seed(0)
    model = weight_norm(nn.Linear(4, 4))
    return torch.export.export(prepare_for_xnnpack(model.eval()), (torch.randn(2, 4),))


def _kept_for_folds(partitioner: XnnpackFoldingPartitioner, ep: ExportedProgram) -> set[object]:
    ops, _ = partitioner.ops_to_not_decompose(ep)
    stock, _ = XnnpackPartitioner().ops_to_not_decompose(ep)
    return set(ops) - set(stock)


def test_a_question_after_a_node_is_replaced_sees_the_replacement() -> None:
    """One node replaced by another keeps the node count: the partitioner's next question
    still judges the program as it now is."""
    ep = _weight_norm_linear()
    partitioner = XnnpackFoldingPartitioner(facts=CrossMethodFacts())
    assert _kept_for_folds(partitioner, ep)
    graph = ep.graph
    count = len(graph.nodes)
    computed = next(n for n in graph.nodes if n.target is LINEAR).args[1]
    assert isinstance(computed, torch.fx.Node)
    (x,) = [n for n in graph.nodes if n.name in ep.graph_signature.user_inputs]
    # The weight computed from the input instead of the parameter: nothing left to fold.
    with graph.inserting_before(computed):
        replacement = graph.call_function(computed.target, (x, *computed.args[1:]))
    replacement.meta = dict(computed.meta)
    computed.replace_all_uses_with(replacement)
    graph.erase_node(computed)
    assert len(graph.nodes) == count
    assert _kept_for_folds(partitioner, ep) == set()
