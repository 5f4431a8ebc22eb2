"""Every option of `XnnpackFoldingPartitioner` reaches what acts on it.

The partitioner's own options decide what folds and are written, as one `FoldOptions`,
onto every GEMM it marks, where the fold pass reads them; the stock options go to the
stock partitioner and its configs. One test per option, each with a non-default value and
an effect that only that value produces.
"""

from __future__ import annotations

import logging
from typing import Optional

import pytest
import torch
from executorch.backends.xnnpack.partition.config.gemm_configs import LinearConfig
from executorch.backends.xnnpack.partition.config.xnnpack_config import ConfigPrecisionType
from torch import nn
from torch.nn.utils.parametrizations import weight_norm

import xnnfold
from xnnfold import XnnpackFoldingPartitioner
from xnnfold._upstream import supports_bf16
from xnnfold.passes import FoldingLinearConfig, FoldOptions
from xnnfold.passes._marks import fold_mark_of
from xnnfold.passes._reason_codes import SHARED_TOO_WIDE
from xnnfold.passes.analysis import (
    find_weight_computation,
    Rejection,
    WeightComputation,
)
from xnnfold.passes.partition import _partitioner as partitioner_module

pytestmark = pytest.mark.runtime


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        weight_norm(nn.Linear(16, 16)), nn.Tanh(), weight_norm(nn.Linear(16, 8))
    ).eval()


def _inputs() -> tuple[torch.Tensor]:
    return (torch.randn(2, 16, generator=torch.Generator().manual_seed(1)),)


def _lower(**options: object) -> tuple[xnnfold.ExplainReport, xnnfold.ProgramSummary]:
    partitioner = XnnpackFoldingPartitioner(**options)  # type: ignore[arg-type]
    edge = xnnfold.lower(_model(), _inputs(), partitioner=partitioner)
    out = xnnfold.run_pte(edge.to_executorch().buffer, _inputs())[0]
    torch.testing.assert_close(out, _model()(*_inputs()), atol=1e-5, rtol=1e-5)
    return xnnfold.explain(edge), xnnfold.summarize(edge)


def test_defaults_fold_both_weights_into_one_delegate() -> None:
    report, summary = _lower()
    assert [r.folded for r in report.rows] == [("weight",), ("weight",)]
    assert summary.delegates == 1


def test_fold_false_folds_nothing() -> None:
    report, _ = _lower(fold=False)
    assert not report.folded


def test_max_fold_nodes_reaches_the_predicate_and_the_mark() -> None:
    report, _ = _lower(max_fold_nodes=2)
    assert not report.folded
    assert all("more than 2 nodes" in (r.reason or "") for r in report.rows)
    partitioner = XnnpackFoldingPartitioner(max_fold_nodes=50)
    edge = xnnfold.lower(_model(), _inputs(), partitioner=partitioner)
    from executorch.exir.lowered_backend_module import get_lowered_submodules

    ((_, lowered, _),) = get_lowered_submodules(edge.exported_program().graph_module)
    marks = [fold_mark_of(n) for n in lowered.original_module.graph.nodes]
    assert [m.options for m in marks if m is not None] == [FoldOptions(max_fold_nodes=50)] * 2


def test_keep_decomposition_filter_returns_the_filter() -> None:
    ep = torch.export.export(xnnfold.prepare_for_xnnpack(_model()), _inputs())
    ep = ep.run_decompositions({})
    assert XnnpackFoldingPartitioner().ops_to_not_decompose(ep)[1] is None
    assert (
        XnnpackFoldingPartitioner(keep_decomposition_filter=True).ops_to_not_decompose(ep)[1]
        is not None
    )


def test_force_non_static_weights_keeps_weights_at_run_time() -> None:
    report, _ = _lower(force_non_static_weights_for_f32_linear=True)
    # As with the stock partitioner: delegated, the weights computed by the program.
    assert all(r.delegated for r in report.rows)
    assert not report.folded


def test_per_op_mode_gives_each_op_its_own_delegate() -> None:
    _, summary = _lower(per_op_mode=True)
    assert summary.delegates > 1


def test_config_precisions_reach_the_configs() -> None:
    partitioner = XnnpackFoldingPartitioner(config_precisions=ConfigPrecisionType.STATIC_QUANT)
    (linear,) = [
        c for c in partitioner.target_partitioner_configs.values() if isinstance(c, LinearConfig)
    ]
    assert linear.enabled_precision_types == [ConfigPrecisionType.STATIC_QUANT]


@pytest.mark.skipif(
    not supports_bf16(), reason="this executorch has no bf16 delegation (the next test)"
)
def test_enable_bf16_reaches_the_configs() -> None:
    partitioner = XnnpackFoldingPartitioner(enable_bf16=True)
    assert all(
        getattr(c, "enable_bf16", None) is True
        for c in partitioner.target_partitioner_configs.values()
        if isinstance(c, FoldingLinearConfig)
    )


def test_enable_bf16_without_support_is_accepted_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """On a release without bf16 delegation (1.4.1) the stock partitioner takes the
    keyword and its configs ignore it; the folding one takes it too, and says so."""
    monkeypatch.setattr(partitioner_module, "supports_bf16", lambda: False)
    with caplog.at_level(logging.WARNING, logger="xnnfold"):
        XnnpackFoldingPartitioner(enable_bf16=True)
    assert any("has no bf16 delegation" in r.getMessage() for r in caplog.records)


def test_configs_replace_only_the_configs_given() -> None:
    partitioner = XnnpackFoldingPartitioner(configs=[LinearConfig])
    assert [type(c) for c in partitioner.target_partitioner_configs.values()] == [
        FoldingLinearConfig
    ]
    report, _ = _lower(configs=[LinearConfig])
    assert [r.folded for r in report.rows] == [("weight",), ("weight",)]


def test_verbose_reaches_the_stock_logger() -> None:
    import logging

    stock = logging.getLogger("executorch.backends.xnnpack.partition.xnnpack_partitioner")
    level = stock.level
    try:
        XnnpackFoldingPartitioner(verbose=True)
        assert stock.level == logging.DEBUG
    finally:
        stock.setLevel(level)


class _Packed(nn.Module):
    """One weight_norm'd projection chunked into ``pieces`` GEMM weights: each chunk's
    computation shares its sources with all the others (5 nodes, and one per piece
    more)."""

    def __init__(self, pieces: int) -> None:
        super().__init__()
        self.pieces = pieces
        self.packed = weight_norm(nn.Linear(8, 4 * pieces, bias=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack(
            [nn.functional.linear(x, w) for w in self.packed.weight.chunk(self.pieces)]
        )


@pytest.mark.slow  # the rule itself: the predicate-level test below, in the fast tier
@pytest.mark.parametrize(("pieces", "folded"), [(20, 20), (21, 0)])
def test_shared_sources_fold_up_to_four_times_max_fold_nodes(pieces: int, folded: int) -> None:
    # 5 + 19 = 24 nodes share the sources at 20 pieces: exactly 4 * max_fold_nodes.
    model = _Packed(pieces).eval()
    x = (torch.randn(2, 8, generator=torch.Generator().manual_seed(0)),)
    edge = xnnfold.lower(model, x, partitioner=XnnpackFoldingPartitioner(max_fold_nodes=6))
    report = xnnfold.explain(edge)
    assert len(report.folded) == folded, report.table()
    out = xnnfold.run_pte(edge.to_executorch().buffer, x)[0]
    torch.testing.assert_close(out, model(*x))


@pytest.mark.parametrize(("pieces", "code"), [(20, None), (21, SHARED_TOO_WIDE.code)])
def test_the_predicate_declines_a_shared_component_past_its_limit(
    pieces: int, code: Optional[str]
) -> None:
    x = (torch.randn(2, 8),)
    ep = torch.export.export(xnnfold.prepare_for_xnnpack(_Packed(pieces).eval()), x)
    ep = ep.run_decompositions({})
    gemm = next(node for node in ep.graph.nodes if node.target is torch.ops.aten.linear.default)
    result = find_weight_computation(
        gemm, 1, ep, arg_positions=(1, 2), options=FoldOptions(max_fold_nodes=6)
    )
    if code is None:
        assert isinstance(result, WeightComputation), result
    else:
        assert isinstance(result, Rejection) and result.code.code == code, result
