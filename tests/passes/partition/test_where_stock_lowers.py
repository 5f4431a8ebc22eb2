"""Wherever the stock partitioner lowers a model, xnnfold lowers it to a program that runs.

The ops of a weight computation are kept out of decomposition before executorch
partitions (`_aten_plan`); a kept op that then lands outside a delegate has no kernel at
all. So the plan must know every reason the edge configs will turn a GEMM away: the
configs the partitioner was given, shapes XNNPACK refuses, options that change what a
config takes. And a GEMM delegated only because xnnfold folds its weight must be one
XNNPACK can load. Each case: the stock partitioner lowers the model and runs it; xnnfold
lowers it, the `.pte` runs through executorch.runtime and matches eager.
"""

from __future__ import annotations

from typing import Any, Optional

import pytest
import torch
import torch.nn.functional as F
from executorch.backends.xnnpack.partition.config.gemm_configs import (
    AddmmConfig,
    ConvolutionConfig,
    LinearConfig,
    MMConfig,
)
from executorch.backends.xnnpack.partition.config.xnnpack_config import XNNPartitionerConfig
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from torch import nn
from torch.nn.utils.parametrizations import spectral_norm, weight_norm

import xnnfold
from xnnfold import XnnpackFoldingPartitioner

# The full tier: the fast tier covers each rule in tests/passes/analysis and end to end once.
pytestmark = [pytest.mark.runtime, pytest.mark.slow]


class _Gemms(nn.Module):
    """A weight_norm linear, a spectral_norm linear after it, and a weight_norm conv."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = weight_norm(nn.Linear(8, 8))
        self.sn = spectral_norm(nn.Linear(8, 8))
        self.conv = weight_norm(nn.Conv1d(8, 8, 3, padding=1))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.sn(self.lin(x)), self.conv(y)


class _DataDependentBatch(nn.Module):
    """GEMMs on ``x[:n.item()]``: a batch of data-dependent (unbacked) size."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = weight_norm(nn.Linear(8, 8))
        self.conv = weight_norm(nn.Conv1d(8, 8, 3, padding=1))

    def forward(self, x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        k = n.item()
        torch._check(k >= 1)
        torch._check(k <= x.shape[0])
        return self.conv(self.lin(x[:k] * 2.0).transpose(1, 2))


class _EmptyBatch(nn.Module):
    """A linear on a batch of no rows, beside a conv on an ordinary one."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = weight_norm(nn.Linear(8, 8))
        self.conv = weight_norm(nn.Conv1d(8, 8, 3, padding=1))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.lin(x), self.conv(y)


def _gemms_inputs() -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(3, 8, generator=g), torch.randn(1, 8, 5, generator=g)


def _build(cls: type[nn.Module]) -> nn.Module:
    torch.manual_seed(0)
    return cls().eval()


def _assert_runs_like_eager(edge: Any, model: nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
    outputs = xnnfold.run_pte(edge.to_executorch().buffer, inputs)
    with torch.no_grad():
        expected = model(*inputs)
    expected = expected if isinstance(expected, tuple) else (expected,)
    assert len(outputs) == len(expected)
    for out, ref in zip(outputs, expected):
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


def _lower_both(
    cls: type[nn.Module],
    inputs: tuple[torch.Tensor, ...],
    *,
    configs: Optional[list[type[XNNPartitionerConfig]]] = None,
    **options: Any,
) -> xnnfold.ExplainReport:
    """Lower with the stock partitioner (it must lower and run: the premise) and with
    xnnfold under the same options; return xnnfold's report."""
    stock = to_edge_transform_and_lower(
        torch.export.export(_build(cls), inputs),
        partitioner=[XnnpackPartitioner(configs, **options)],
    )
    _assert_runs_like_eager(stock, _build(cls), inputs)
    edge = xnnfold.lower(
        _build(cls), inputs, partitioner=XnnpackFoldingPartitioner(configs, **options)
    )
    _assert_runs_like_eager(edge, _build(cls), inputs)
    return xnnfold.explain(edge)


@pytest.mark.parametrize(
    "config", [ConvolutionConfig, LinearConfig, AddmmConfig, MMConfig], ids=lambda c: c.__name__
)
def test_a_gemm_without_its_config_keeps_no_op(config: type[XNNPartitionerConfig]) -> None:
    report = _lower_both(_Gemms, _gemms_inputs(), configs=[config])
    convolutions = [r for r in report.rows if r.op == "convolution"]
    assert [r.folded for r in convolutions] == (
        [("weight",)] if config is ConvolutionConfig else [()]
    )


def test_force_non_static_weights_stores_a_convolution_bias() -> None:
    # executorch's configs hand every GEMM its bias at run time under this linear option;
    # XNNPACK's convolution then fails to load. The folded convolution keeps a static bias.
    report = _lower_both(_Gemms, _gemms_inputs(), force_non_static_weights_for_f32_linear=True)
    (conv,) = [r for r in report.rows if r.op == "convolution"]
    assert conv.delegated and conv.folded == ("weight",)
    assert all(r.delegated and not r.folded for r in report.rows if r.op != "convolution")


def test_force_non_static_weights_runs_a_stored_convolution() -> None:
    # The same rule for a convolution with parameters: stock's program fails to load.
    model = nn.Sequential(nn.Conv1d(8, 8, 3)).eval()
    inputs = (torch.randn(1, 8, 5, generator=torch.Generator().manual_seed(2)),)
    partitioner = XnnpackFoldingPartitioner(force_non_static_weights_for_f32_linear=True)
    edge = xnnfold.lower(model, inputs, partitioner=partitioner)
    assert [r.delegated for r in xnnfold.explain(edge).rows] == [True]
    _assert_runs_like_eager(edge, model, inputs)


def test_a_gemm_on_a_data_dependent_size_keeps_no_op() -> None:
    inputs = (torch.randn(4, 5, 8, generator=torch.Generator().manual_seed(3)), torch.tensor(3))
    report = _lower_both(_DataDependentBatch, inputs)
    # XNNPACK takes no tensor of unbacked size: the GEMMs stay on portable, as in stock.
    assert report.rows and not any(r.delegated for r in report.rows)


def test_a_gemm_on_an_empty_tensor_keeps_no_op() -> None:
    g = torch.Generator().manual_seed(4)
    inputs = (torch.randn(0, 8, generator=g), torch.randn(1, 8, 5, generator=g))
    report = _lower_both(_EmptyBatch, inputs)
    (conv,) = [r for r in report.rows if r.op == "convolution"]
    assert conv.delegated and conv.folded == ("weight",)
    assert [r.delegated for r in report.rows if r.module == "lin"] == [False]


class _RunTimeBias(nn.Module):
    """A weight_norm kernel with a bias computed from an input."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = weight_norm(nn.Conv1d(4, 4, 3))

    def forward(self, x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return F.conv1d(x, self.conv.weight, b * 2.0)


class _WrittenBias(nn.Module):
    """A convolution whose bias is a buffer the program writes."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4, 3))
        self.register_buffer("b", torch.randn(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.conv1d(x, self.w, self.b)
        self.b.add_(1.0)
        return y


def test_force_non_static_weights_keeps_no_op_for_a_convolution_with_a_run_time_bias() -> None:
    # The convolution takes a static bias only, so this one stays on portable: the plan
    # must not keep its kernel's `_weight_norm` (which would have no kernel there).
    g = torch.Generator().manual_seed(5)
    inputs = (torch.randn(1, 4, 6, generator=g), torch.randn(4, generator=g))
    report = _lower_both(_RunTimeBias, inputs, force_non_static_weights_for_f32_linear=True)
    assert [(r.op, r.delegated) for r in report.rows] == [("convolution", False)]


def test_force_non_static_weights_stores_no_written_buffer_as_a_convolution_bias() -> None:
    from executorch.exir import ExecutorchBackendConfig
    from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass

    x = torch.randn(1, 4, 6, generator=torch.Generator().manual_seed(6))
    partitioner = XnnpackFoldingPartitioner(force_non_static_weights_for_f32_linear=True)
    edge = xnnfold.lower(_build(_WrittenBias), (x,), partitioner=partitioner)
    (row,) = xnnfold.explain(edge).rows
    assert not row.delegated and "which the program writes" in (row.reason or ""), row
    config = ExecutorchBackendConfig(passes=[InitializedMutableBufferPass(["b"])])
    program = xnnfold.LoadedProgram(edge.to_executorch(config).buffer)
    reference = _build(_WrittenBias)
    for _ in range(3):  # the bias moves on every call
        (out,) = program([x])
        torch.testing.assert_close(out, reference(x), atol=1e-5, rtol=1e-5)
