"""Ops whose arguments XNNPACK computes differently from eager stay on portable.

`xnnfold/passes/partition/_argument_checks.py`: an ``avg_pool2d`` whose divisor override
meets padding left out of the average (XNF520), an ``upsample_bilinear2d`` whose scale
factors are not the ratio of its sizes (XNF521), and a ``max.dim`` whose dim or keepdim
XNNPACK's serializer refuses (XNF522). The unit tests read each rule on an
exported node; the end-to-end tests lower with stock and with xnnfold, run both `.pte`
files through executorch.runtime against eager, and read the WARNING and the `explain`
row.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

import pytest
import torch
import torch.nn.functional as F
from executorch.backends.xnnpack.partition.config import ALL_PARTITIONER_CONFIGS
from executorch.backends.xnnpack.partition.config.generic_node_configs import (
    AvgPoolingConfig,
    UpsampleBilinear2dConfig,
)
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from executorch.runtime import Runtime
from torch import nn
from torch.fx import Node

import xnnfold
from xnnfold.passes._reason_codes import OP_ARGUMENT_CODES
from xnnfold.passes.partition._argument_checks import (
    avg_pool_problem,
    checked_configs,
    max_dim_problem,
    resize_problem,
)
from xnnfold.passes.partition._outcome import PARTITIONER_LOGGER


class _Fn(nn.Module):
    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


def _pool(**kwargs: Any) -> _Fn:
    return _Fn(lambda x: F.avg_pool2d(x, 3, 2, **kwargs))


def _resize(**kwargs: Any) -> _Fn:
    return _Fn(lambda x: F.interpolate(x, mode="bilinear", **kwargs))


IMAGE = torch.rand(1, 2, 5, 5, generator=torch.Generator().manual_seed(0)) + 0.5


def _node(module: nn.Module, name: str) -> Node:
    ep = torch.export.export(module, (IMAGE,))
    return next(n for n in ep.graph.nodes if n.op == "call_function" and name in str(n.target))


def test_every_op_argument_code_has_its_rule_here() -> None:
    """A new code on an op other than a GEMM needs its rule's cases in this file."""
    assert {"XNF520", "XNF521", "XNF522"} == OP_ARGUMENT_CODES


def test_pool_divisor_with_padding_left_out_is_a_problem() -> None:
    node = _node(_pool(padding=1, count_include_pad=False, divisor_override=9), "avg_pool2d")
    problem = avg_pool_problem(node)
    assert problem is not None and problem.code.code == "XNF520"


def test_pool_arguments_given_by_keyword_are_read() -> None:
    """A graph may pass an argument by keyword (a pass that rewrites it, a graph built by
    hand): the rule reads it there, not its default."""
    node = _node(_pool(padding=1, count_include_pad=False, divisor_override=9), "avg_pool2d")
    x, kernel, stride, padding, ceil_mode, include_pad, divisor = node.args
    node.args = (x, kernel, stride, padding)
    node.kwargs = {
        "ceil_mode": ceil_mode,
        "count_include_pad": include_pad,
        "divisor_override": divisor,
    }
    problem = avg_pool_problem(node)
    assert problem is not None and problem.code.code == "XNF520"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"padding": 1, "count_include_pad": False},
        {"padding": 0, "divisor_override": 9},
        {"padding": 1, "count_include_pad": True, "divisor_override": 9},
    ],
    ids=["no-divisor", "no-padding", "padding-counted"],
)
def test_pool_without_that_combination_is_no_problem(kwargs: dict[str, Any]) -> None:
    assert avg_pool_problem(_node(_pool(**kwargs), "avg_pool2d")) is None


def test_resize_scale_off_the_size_ratio_is_a_problem() -> None:
    node = _node(_resize(scale_factor=1.5, recompute_scale_factor=False), "upsample_bilinear2d")
    problem = resize_problem(node)
    assert problem is not None and problem.code.code == "XNF521"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"scale_factor": 2},
        {"size": 7},
        {"scale_factor": 1.5, "recompute_scale_factor": False, "align_corners": True},
    ],
    ids=["exact-scale", "size", "align-corners"],
)
def test_resize_by_size_or_exact_scale_is_no_problem(kwargs: dict[str, Any]) -> None:
    assert resize_problem(_node(_resize(**kwargs), "upsample_bilinear2d")) is None


def _max(dim: int, keepdim: bool) -> _Fn:
    return _Fn(lambda x: torch.max(x, dim, keepdim=keepdim)[0])


@pytest.mark.parametrize("dim, keepdim", [(-1, True), (3, False), (1, True)])
def test_max_dim_the_serializer_refuses_is_a_problem(dim: int, keepdim: bool) -> None:
    problem = max_dim_problem(_node(_max(dim, keepdim), "max.dim"))
    assert problem is not None and problem.code.code == "XNF522"


@pytest.mark.parametrize("dim", [2, 3])
def test_max_dim_over_a_spatial_dim_kept_is_no_problem(dim: int) -> None:
    assert max_dim_problem(_node(_max(dim, True), "max.dim")) is None


def test_checked_configs_replace_without_changing_the_stock_list() -> None:
    before = list(ALL_PARTITIONER_CONFIGS)
    checked = checked_configs(ALL_PARTITIONER_CONFIGS)
    assert before == ALL_PARTITIONER_CONFIGS
    assert [c.target_name for c in checked] == [c.target_name for c in before]
    for stock in (AvgPoolingConfig, UpsampleBilinear2dConfig):
        replacement = checked[before.index(stock)]
        assert replacement is not stock and issubclass(replacement, stock)


def _run(buffer: bytes) -> torch.Tensor:
    program = Runtime.get().load_program(buffer)
    method = program.load_method("forward")
    return method.execute([IMAGE])[0]


def _delegated(edge: Any, op: str) -> bool:
    top = [n for n in edge.exported_program().graph.nodes if n.op == "call_function"]
    return not any(op in str(n.target) for n in top)


E2E = {
    "avg_pool2d": _pool(padding=1, count_include_pad=False, divisor_override=9),
    "upsample_bilinear2d": _resize(scale_factor=1.5, recompute_scale_factor=False),
}


@pytest.mark.runtime
@pytest.mark.slow
@pytest.mark.parametrize("op", list(E2E))
def test_declined_op_runs_as_eager_where_stock_does_not(
    op: str, caplog: pytest.LogCaptureFixture
) -> None:
    module = E2E[op]
    expected = module(IMAGE)
    stock = to_edge_transform_and_lower(
        torch.export.export(module, (IMAGE,)), partitioner=[XnnpackPartitioner()]
    )
    with caplog.at_level(logging.WARNING, logger=PARTITIONER_LOGGER):
        folding = xnnfold.lower(module, (IMAGE,))
    assert _delegated(stock, op) and not _delegated(folding, op)
    assert (_run(stock.to_executorch().buffer) - expected).abs().max() > 1e-2
    torch.testing.assert_close(_run(folding.to_executorch().buffer), expected)
    code = {"avg_pool2d": "XNF520", "upsample_bilinear2d": "XNF521"}[op]
    assert any(code in r.getMessage() and op in r.getMessage() for r in caplog.records)
    (row,) = xnnfold.explain(folding).ops
    assert (row.op, row.code) == (op, code)


@pytest.mark.runtime
@pytest.mark.slow
def test_max_dim_stock_cannot_lower_runs_as_eager(caplog: pytest.LogCaptureFixture) -> None:
    module = _max(-1, False)
    with pytest.raises(RuntimeError, match="amax.default only supports"):
        to_edge_transform_and_lower(
            torch.export.export(module, (IMAGE,)), partitioner=[XnnpackPartitioner()]
        )
    with caplog.at_level(logging.WARNING, logger=PARTITIONER_LOGGER):
        folding = xnnfold.lower(module, (IMAGE,))
    torch.testing.assert_close(_run(folding.to_executorch().buffer), module(IMAGE))
    assert any("XNF522" in r.getMessage() for r in caplog.records)
    (row,) = xnnfold.explain(folding).ops
    assert (row.op, row.code) == ("max", "XNF522")


@pytest.mark.runtime
@pytest.mark.slow
def test_program_without_such_an_argument_is_unchanged() -> None:
    """The same ops with arguments XNNPACK honours: xnnfold writes stock's bytes."""
    module = _Fn(
        lambda x: F.interpolate(
            F.avg_pool2d(x, 3, 1, 1, False, False), scale_factor=2, mode="bilinear"
        )
    )
    stock = to_edge_transform_and_lower(
        torch.export.export(module, (IMAGE,)), partitioner=[XnnpackPartitioner()]
    )
    folding = xnnfold.lower(module, (IMAGE,))
    assert folding.to_executorch().buffer == stock.to_executorch().buffer
    assert xnnfold.explain(folding).ops == ()
