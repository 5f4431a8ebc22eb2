"""Every convolution argument is honoured when the weight and bias are folded.

XNNPACK's convolution visitor reads stride, padding, dilation, groups, transposed and
output_padding from the edge `convolution` node; a folded weight changes none of them. Each
case varies one argument from its default on a weight_norm convolution with a computed
bias, and runs the `.pte` through executorch.runtime against eager.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.parametrizations import weight_norm

import xnnfold

# The full tier: the fast tier covers each rule in tests/passes/analysis and end to end once.
pytestmark = [pytest.mark.runtime, pytest.mark.slow]

CHANNELS = 4

CASES: dict[str, tuple[type[nn.Module], dict[str, Any]]] = {
    "conv1d-stride": (nn.Conv1d, {"kernel_size": 3, "stride": 2}),
    "conv1d-padding": (nn.Conv1d, {"kernel_size": 3, "padding": 3}),
    "conv1d-dilation": (nn.Conv1d, {"kernel_size": 3, "dilation": 2, "padding": 2}),
    "conv1d-groups": (nn.Conv1d, {"kernel_size": 3, "groups": 2}),
    "conv1d-depthwise": (
        nn.Conv1d,
        {"kernel_size": 3, "groups": CHANNELS, "out_channels": 2 * CHANNELS},
    ),
    "conv1d-no_bias": (nn.Conv1d, {"kernel_size": 3, "bias": False}),
    "conv1d-same": (nn.Conv1d, {"kernel_size": 4, "padding": "same"}),
    "conv2d-stride": (nn.Conv2d, {"kernel_size": 3, "stride": (2, 1)}),
    "conv2d-padding": (nn.Conv2d, {"kernel_size": (3, 1), "padding": (1, 2)}),
    "conv2d-dilation": (nn.Conv2d, {"kernel_size": 3, "dilation": (2, 1)}),
    "conv2d-groups": (nn.Conv2d, {"kernel_size": 3, "groups": 2}),
    "conv2d-depthwise": (nn.Conv2d, {"kernel_size": 3, "groups": CHANNELS}),
    "conv_transpose1d-stride": (nn.ConvTranspose1d, {"kernel_size": 3, "stride": 2}),
    "conv_transpose1d-output_padding": (
        nn.ConvTranspose1d,
        {"kernel_size": 3, "stride": 2, "output_padding": 1},
    ),
    "conv_transpose1d-padding": (nn.ConvTranspose1d, {"kernel_size": 3, "padding": 1}),
    "conv_transpose1d-dilation": (nn.ConvTranspose1d, {"kernel_size": 3, "dilation": 2}),
    "conv_transpose1d-groups": (nn.ConvTranspose1d, {"kernel_size": 3, "groups": 2}),
    "conv_transpose2d-stride": (nn.ConvTranspose2d, {"kernel_size": 3, "stride": (2, 3)}),
    "conv_transpose2d-output_padding": (
        nn.ConvTranspose2d,
        {"kernel_size": 3, "stride": (2, 3), "output_padding": (1, 2)},
    ),
    "conv_transpose2d-padding": (nn.ConvTranspose2d, {"kernel_size": 3, "padding": (1, 0)}),
    "conv_transpose2d-dilation": (nn.ConvTranspose2d, {"kernel_size": 3, "dilation": (1, 2)}),
    "conv_transpose2d-groups": (nn.ConvTranspose2d, {"kernel_size": 3, "groups": 2}),
    "conv_transpose2d-depthwise": (nn.ConvTranspose2d, {"kernel_size": 3, "groups": CHANNELS}),
}


class ComputedBias(nn.Module):
    """The convolution with its bias computed: ``bias * 0.5 + shift``."""

    def __init__(self, conv: nn.Module) -> None:
        super().__init__()
        self.conv = conv
        self.shift = nn.Parameter(torch.randn(conv.out_channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        conv = self.conv
        bias = None if conv.bias is None else conv.bias * 0.5 + self.shift
        if isinstance(conv, (nn.ConvTranspose1d, nn.ConvTranspose2d)):
            functional = (
                F.conv_transpose1d if isinstance(conv, nn.ConvTranspose1d) else F.conv_transpose2d
            )
            return functional(
                x,
                conv.weight,
                bias,
                conv.stride,
                conv.padding,
                conv.output_padding,
                conv.groups,
                conv.dilation,
            )
        return conv._conv_forward(x, conv.weight, bias)


def _model(name: str) -> nn.Module:
    layer, kwargs = CASES[name]
    kwargs = {"in_channels": CHANNELS, "out_channels": CHANNELS, **kwargs}
    torch.manual_seed(0)
    conv = weight_norm(layer(**kwargs))
    return ComputedBias(conv).eval()


def _inputs(name: str) -> tuple[torch.Tensor]:
    spatial = (9,) if "1d" in name else (7, 6)
    return (torch.randn(1, CHANNELS, *spatial, generator=torch.Generator().manual_seed(1)),)


@pytest.mark.parametrize("name", sorted(CASES))
def test_convolution_argument_is_honoured(name: str) -> None:
    model = _model(name)
    edge = xnnfold.lower(model, _inputs(name))
    (row,) = xnnfold.explain(edge).rows
    expected = ("weight",) if model.conv.bias is None else ("weight", "bias")
    assert row.delegated and row.folded == expected, row
    out = xnnfold.run_pte(edge.to_executorch().buffer, _inputs(name))[0]
    torch.testing.assert_close(out, model(*_inputs(name)), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("computed", [False, True], ids=["parameter", "weight_norm"])
def test_output_padding_not_below_stride_stays_on_portable(computed: bool) -> None:
    """PyTorch allows output_padding < dilation; XNNPACK's deconvolution needs < stride."""
    torch.manual_seed(0)
    conv = nn.ConvTranspose2d(6, 6, 3, stride=1, dilation=2, output_padding=1, groups=3)
    model = (weight_norm(conv) if computed else conv).eval()
    inputs = (torch.randn(1, 6, 5, 5, generator=torch.Generator().manual_seed(1)),)
    edge = xnnfold.lower(model, inputs)
    (row,) = xnnfold.explain(edge).outside
    assert "output_padding" in (row.reason or "")
    out = xnnfold.run_pte(edge.to_executorch().buffer, inputs)[0]
    torch.testing.assert_close(out, model(*inputs), atol=1e-5, rtol=1e-5)


class RunTimeBias(nn.Module):
    """A weight_norm convolution whose bias is computed from the input."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = weight_norm(nn.Conv1d(CHANNELS, CHANNELS, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv._conv_forward(x, self.conv.weight, x.mean(dim=(0, 2)))


def test_a_run_time_bias_leaves_the_weight_computation_decomposed() -> None:
    """The GEMM stays on portable (XNNPACK wants a static bias), so nothing of its weight
    computation may be kept undecomposed: `_weight_norm` has no portable kernel."""
    model = RunTimeBias().eval()
    inputs = _inputs("conv1d")
    edge = xnnfold.lower(model, inputs)
    assert len(xnnfold.explain(edge).outside) == 1
    out = xnnfold.run_pte(edge.to_executorch().buffer, inputs)[0]
    torch.testing.assert_close(out, model(*inputs), atol=1e-5, rtol=1e-5)


class SharedKernel(nn.Module):
    """A Conv1d whose kernel is also read by an elementwise op, with a computed bias
    (so that only folding makes the convolution delegable)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv1d(CHANNELS, CHANNELS, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv._conv_forward(x, self.conv.weight, self.conv.bias * 2.0)
        return y + torch.tanh(self.conv.weight).mean()


class CalledTwice(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv1d(CHANNELS, CHANNELS, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(torch.tanh(self.conv(x)))


@pytest.mark.parametrize("build", [SharedKernel, CalledTwice], ids=["elementwise", "called_twice"])
def test_a_shared_1d_kernel_is_not_delegated(build: type[nn.Module]) -> None:
    """XNNPACK reshapes a 1D kernel in place: with another reader in the delegate the
    program fails at run time (elementwise) or in lowering (a second convolution)."""
    model = build().eval()
    inputs = _inputs("conv1d")
    edge = xnnfold.lower(model, inputs)
    assert all("reshapes a 1D kernel" in (r.reason or "") for r in xnnfold.explain(edge).outside)
    out = xnnfold.run_pte(edge.to_executorch().buffer, inputs)[0]
    torch.testing.assert_close(out, model(*inputs), atol=1e-5, rtol=1e-5)


class Shared2DKernel(nn.Module):
    """A 2D (transposed) convolution whose kernel is also read by an elementwise op: XNNPACK
    computes the convolution wrongly (stock partitioner: off by ~30)."""

    def __init__(self, transposed: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        shape = (7, 14, 2, 2) if transposed else (14, 7, 2, 2)
        self.weight = nn.Parameter(torch.randn(shape))
        self.transposed = transposed

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        conv = F.conv_transpose2d if self.transposed else F.conv2d
        return conv(x, self.weight), self.weight.abs().sum() * torch.ones(1)


@pytest.mark.parametrize("transposed", [False, True], ids=["conv2d", "conv_transpose2d"])
def test_a_2d_kernel_shared_with_an_elementwise_op_stays_on_portable(transposed: bool) -> None:
    model = Shared2DKernel(transposed).eval()
    inputs = (torch.randn(2, 7, 6, 6, generator=torch.Generator().manual_seed(1)),)
    edge = xnnfold.lower(model, inputs)
    (row,) = xnnfold.explain(edge).outside
    assert "is not a convolution; XNNPACK computes such a convolution wrongly" in (row.reason or "")
    outputs = xnnfold.run_pte(edge.to_executorch().buffer, inputs)
    for out, ref in zip(outputs, model(*inputs)):
        torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-5)


def test_a_2d_kernel_shared_by_two_convolutions_is_delegated() -> None:
    class TwoConvs(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.weight = nn.Parameter(torch.randn(7, 7, 2, 2))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.conv2d(F.conv2d(x, self.weight), self.weight)

    model = TwoConvs().eval()
    inputs = (torch.randn(2, 7, 6, 6, generator=torch.Generator().manual_seed(1)),)
    edge = xnnfold.lower(model, inputs)
    assert not xnnfold.explain(edge).outside
    out = xnnfold.run_pte(edge.to_executorch().buffer, inputs)[0]
    torch.testing.assert_close(out, model(*inputs), atol=1e-4, rtol=1e-5)
