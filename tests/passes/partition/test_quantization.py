"""PT2E quantization with XNNPACKQuantizer: computed weights and biases stay delegated.

The flow is the documented one: ``prepare_for_xnnpack`` -> ``torch.export`` ->
``prepare_pt2e`` -> calibrate -> ``convert_pt2e`` -> ``torch.export`` ->
``to_edge_transform_and_lower(XnnpackFoldingPartitioner())``. ``convert_pt2e`` already
constant-folds ``weight_norm -> quantize`` into an int8 weight (``fold_quantize=True``), so
quantized weights reach the partitioner as ``dequantize(int8 constant)`` like hand-folded
ones. What it leaves is (a) a computed bias, which XNNPACKQuantizer keeps in fp32 and the
stock configs decline on a quantized GEMM, (b) GEMMs the quantizer skips (in dynamic mode
every convolution but a plain 2D one, and any conv followed by a ReLU), whose computed fp32
weight is xnnfold's ordinary fold, and (c) the orphaned buffers of spectral_norm, which
`remove_unused_constants` drops. Every case is compared with a fresh seeded instance whose
parametrizations and computed bias were folded by hand, quantized the same way and lowered
with the stock partitioner.
"""

from __future__ import annotations

import functools

import pytest
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
    get_symmetric_quantization_config,
    XNNPACKQuantizer,
)
from executorch.exir import EdgeProgramManager, to_edge_transform_and_lower
from executorch.exir.lowered_backend_module import LoweredBackendModule
from torch import nn
from torch.export import ExportedProgram
from torch.nn.utils import parametrize
from torch.nn.utils.parametrizations import spectral_norm, weight_norm
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

import xnnfold
from xnnfold.fixtures import Fixture, ScaledBias
from xnnfold.passes._ops import EDGE_GEMM_ARGS

from tests._lowering import Lowered

# The full tier: the fast tier covers each rule in tests/passes/analysis and end to end once.
pytestmark = [pytest.mark.runtime, pytest.mark.slow]

MODES = ["static", "dynamic"]


class ComputedBiasLinear(nn.Module):
    """A linear whose bias is computed in ``forward`` (no parametrization, so no mark)."""

    def __init__(self, features_in: int, features_out: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(features_out, features_in) / features_in**0.5)
        self.b = nn.Parameter(torch.randn(features_out))
        self.s = nn.Parameter(torch.rand(features_out) + 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(x, self.weight, self.b * self.s)

    def hand_folded(self) -> nn.Linear:
        linear = nn.Linear(self.weight.shape[1], self.weight.shape[0])
        with torch.no_grad():
            linear.weight.copy_(self.weight)
            linear.bias.copy_(self.b * self.s)
        return linear


class QuantNet(nn.Module):
    """weight_norm Conv2d, Conv1d (+ReLU) and Linear (with a parametrized bias), a
    spectral_norm ConvTranspose1d, then a linear with a bias computed in ``forward``.

    The Conv2d has no ReLU after it so that dynamic quantization takes it too.
    """

    def __init__(self) -> None:
        super().__init__()
        self.conv2d = weight_norm(nn.Conv2d(4, 8, 3, padding=1))
        self.conv1d = weight_norm(nn.Conv1d(8, 8, 3, padding=1))
        self.upsample = spectral_norm(nn.ConvTranspose1d(8, 8, 4, stride=2, padding=1))
        self.linear = weight_norm(nn.Linear(8, 16))
        parametrize.register_parametrization(self.linear, "bias", ScaledBias())
        self.head = ComputedBiasLinear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv2d(x).flatten(2)
        x = self.upsample(torch.relu(self.conv1d(x))).transpose(1, 2)
        return self.head(torch.relu(self.linear(x)))


FIXTURE = Fixture(
    "quant_net",
    "weight_norm Conv2d/Conv1d/Linear, spectral_norm ConvTranspose1d, two computed biases",
    QuantNet,
    lambda: (torch.randn(1, 4, 8, 8),),
)


def _hand_folded() -> nn.Module:
    model = FIXTURE.hand_folded()
    model.head = model.head.hand_folded()
    return model.eval()


def _calibration() -> list[tuple[torch.Tensor, ...]]:
    generator = torch.Generator().manual_seed(7)
    return [(torch.randn(1, 4, 8, 8, generator=generator),) for _ in range(4)]


def _quantized(model: nn.Module, mode: str) -> ExportedProgram:
    inputs = FIXTURE.inputs()
    quantizer = XNNPACKQuantizer().set_global(
        get_symmetric_quantization_config(is_per_channel=True, is_dynamic=mode == "dynamic")
    )
    prepared = prepare_pt2e(torch.export.export(model, inputs).module(), quantizer)
    for batch in _calibration():
        prepared(*batch)
    return xnnfold.remove_unused_constants(torch.export.export(convert_pt2e(prepared), inputs))


def _lowered(ep: ExportedProgram, partitioner: XnnpackPartitioner) -> Lowered:
    edge = to_edge_transform_and_lower(ep, partitioner=[partitioner])
    summary = xnnfold.summarize(edge)
    return Lowered(edge, edge.to_executorch().buffer, summary)


@functools.cache
def lowered(variant: str, mode: str) -> Lowered:
    """``xnnfold``: the parametrized model through xnnfold; ``hand_folded``: the hand-folded
    twin with the stock partitioner; ``hand_folded_xnnfold``: that twin with xnnfold's."""
    if variant == "xnnfold":
        ep = _quantized(xnnfold.prepare_for_xnnpack(FIXTURE.model()), mode)
        return _lowered(ep, xnnfold.XnnpackFoldingPartitioner())
    ep = _quantized(_hand_folded(), mode)
    if variant == "hand_folded":
        return _lowered(ep, XnnpackPartitioner())
    assert variant == "hand_folded_xnnfold", variant
    return _lowered(ep, xnnfold.XnnpackFoldingPartitioner())


@functools.cache
def output(variant: str, mode: str) -> torch.Tensor:
    (out,) = xnnfold.run_pte(lowered(variant, mode).buffer, FIXTURE.inputs())
    return out


def _eager() -> torch.Tensor:
    with torch.no_grad():
        return FIXTURE.model()(*FIXTURE.inputs())


def _int8_weight_gemms(edge: EdgeProgramManager) -> int:
    """GEMMs inside delegates whose weight is a per-channel dequantize of a constant."""
    count = 0
    for module in edge.exported_program().graph_module.modules():
        if not isinstance(module, LoweredBackendModule):
            continue
        for node in module.original_module.graph.nodes:
            positions = EDGE_GEMM_ARGS.get(node.target)
            if positions is None:
                continue
            weight = node.args[positions[0]]
            if "dequantize_per_channel" in str(getattr(weight, "target", "")) and (
                weight.args[0].op == "placeholder"
            ):
                count += 1
    return count


@pytest.mark.parametrize("mode", MODES)
def test_fully_delegated(mode: str) -> None:
    summary = lowered("xnnfold", mode).summary
    assert summary.fully_delegated, summary.outside_ops_text()


@pytest.mark.parametrize("mode", MODES)
def test_weights_quantized_inside_delegate_like_hand_folded(mode: str) -> None:
    ours = _int8_weight_gemms(lowered("xnnfold", mode).edge)
    assert ours > 0
    assert ours == _int8_weight_gemms(lowered("hand_folded", mode).edge)


@pytest.mark.parametrize("mode", MODES)
def test_output_bitwise_equal_to_hand_folded(mode: str) -> None:
    """Same int8 weights, same fp32 biases, same activation scales: the same numbers."""
    ours, theirs = output("xnnfold", mode), output("hand_folded", mode)
    assert torch.equal(ours, theirs), (ours - theirs).abs().max()


@pytest.mark.parametrize("mode", MODES)
def test_error_vs_eager_no_larger_than_hand_folded(mode: str) -> None:
    eager = _eager()
    ours = (output("xnnfold", mode) - eager).abs().max()
    theirs = (output("hand_folded", mode) - eager).abs().max()
    assert ours <= theirs, (ours, theirs)
    # The quantized program still computes the model: its error is quantization noise.
    assert (output("xnnfold", mode) - eager).norm() <= 0.05 * eager.norm()


@pytest.mark.parametrize("mode", MODES)
def test_pte_no_larger_than_hand_folded(mode: str) -> None:
    assert len(lowered("xnnfold", mode).buffer) <= len(lowered("hand_folded", mode).buffer)


@pytest.mark.parametrize("mode", MODES)
def test_source_parameters_not_stored(mode: str) -> None:
    buffer = lowered("xnnfold", mode).buffer
    for key, tensor in FIXTURE.model().state_dict().items():
        if "parametrizations" in key or key in ("head.b", "head.s"):
            data = tensor.detach().contiguous().numpy().tobytes()
            assert data not in buffer, f"{key} ({len(data)} bytes) is stored in the .pte"


@pytest.mark.parametrize("mode", MODES)
def test_no_computed_weights_byte_identical_to_stock(mode: str) -> None:
    ours = lowered("hand_folded_xnnfold", mode).buffer
    assert ours == lowered("hand_folded", mode).buffer


class _Stateful(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("read", torch.ones(3))
        self.register_buffer("orphan", torch.ones(3))
        self.register_buffer("written", torch.zeros(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.written.add_(1.0)
        return x * self.read


def test_remove_unused_constants_keeps_read_and_written_buffers() -> None:
    ep = torch.export.export(_Stateful(), (torch.randn(3),))
    ep = xnnfold.remove_unused_constants(ep)
    targets = {spec.target for spec in ep.graph_signature.input_specs}
    assert targets == {"read", "written", None}, targets
    assert "orphan" not in ep.state_dict
    x = torch.randn(3)
    torch.testing.assert_close(ep.module()(x), x)
