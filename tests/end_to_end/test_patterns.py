"""Weights computed in ``forward``: each pattern of `xnnfold.fixtures._patterns`, lowered
and run through executorch.runtime against eager.

Where the fold evaluates the very ops eager PyTorch runs (every folded pattern here: the
edge graph keeps `mul`, `cat`, `permute`, `_native_batch_norm_legit`, `var`, `mean`,
`_to_copy`, ... as eager calls them), the program must equal the hand-folded one bit for
bit. The comparison with eager itself is `allclose`: XNNPACK's GEMM kernels sum in another
order than PyTorch's.
"""

from __future__ import annotations

import functools
import logging

import pytest
import torch
from executorch.backends.xnnpack.serialization import xnnpack_graph_schema

import xnnfold
from xnnfold._meta import FOLD_META_KEY
from xnnfold.fixtures._patterns import VarMeanStdConv2d
from xnnfold.passes import XnnpackFoldingPartitioner
from xnnfold.passes.partition._aten_plan import keepable

from tests._lowering import (
    fixture_by_name,
    lower_folding,
    lower_stock,
    lowered_folding,
    lowered_hand_folded,
)

# The full tier: the fast tier covers each rule in tests/passes/analysis and end to end once.
pytestmark = [pytest.mark.runtime, pytest.mark.slow]

PARTITIONER_LOGGER = "xnnfold.passes.partition._partitioner"

# Fully delegated by xnnfold, and equal bit for bit to the hand-folded program.
HAND_FOLDABLE = [
    "ws_conv_batch_norm",
    "ws_conv_var_mean",
    "eqlr_conv",
    "eqlr_linear",
    "transformed_weights",
    "cast_bf16_conv",
    "cast_fp16_conv",
    "lora_mlp",
    "nested_weight_norm",
]
# Computed weights no parametrization expresses: the hand-folded twin is the model itself.
BEYOND_HAND_FOLDING = ["wavlm_attention"]
FOLDED = HAND_FOLDABLE + BEYOND_HAND_FOLDING


def _outputs(result: object) -> tuple[torch.Tensor, ...]:
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)  # type: ignore[arg-type]


def _assert_matches_eager(name: str, buffer: bytes) -> None:
    fixture = fixture_by_name(name)
    inputs = fixture.inputs()
    with torch.no_grad():
        expected = _outputs(fixture.model()(*inputs))
    outputs = xnnfold.run_pte(buffer, inputs)
    assert len(outputs) == len(expected)
    for out, ref in zip(outputs, expected):
        if ref.dtype.is_floating_point:
            torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
        else:
            assert torch.equal(out, ref)


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == PARTITIONER_LOGGER and r.levelno == logging.WARNING
    ]


@pytest.mark.parametrize("name", FOLDED)
def test_fully_delegated(name: str) -> None:
    summary = lowered_folding(name).summary
    assert summary.fully_delegated, summary.outside_ops_text()


@pytest.mark.parametrize("name", FOLDED)
def test_matches_eager(name: str) -> None:
    _assert_matches_eager(name, lowered_folding(name).buffer)


@pytest.mark.parametrize("name", HAND_FOLDABLE)
def test_bitwise_equal_to_hand_folded(name: str) -> None:
    inputs = fixture_by_name(name).inputs()
    ours = xnnfold.run_pte(lowered_folding(name).buffer, inputs)
    theirs = xnnfold.run_pte(lowered_hand_folded(name).buffer, inputs)
    for a, b in zip(ours, theirs):
        assert torch.equal(a, b), (a - b).abs().max()


@pytest.mark.parametrize("name", HAND_FOLDABLE)
def test_pte_no_larger_than_hand_folded(name: str) -> None:
    assert len(lowered_folding(name).buffer) <= len(lowered_hand_folded(name).buffer)


@pytest.mark.parametrize("name", ["cast_bf16_conv", "cast_fp16_conv"])
def test_cast_weight_is_folded_at_the_gemm_dtype(name: str) -> None:
    """The size rule measures sources at the folded dtype: `w_half.float()` folds to
    the fp32 weight a hand-folded model stores, though that is twice the half bytes."""
    fixture = fixture_by_name(name)
    half = fixture.model().weight
    assert half.dtype in (torch.bfloat16, torch.float16)
    assert lowered_folding(name).summary.fully_delegated
    half_bytes = half.detach().view(torch.int16).numpy().tobytes()
    assert half_bytes not in lowered_folding(name).buffer


class _Int8Weight(torch.nn.Module):
    """Weight-only int8 storage dequantized in ``forward``."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("w_int8", torch.randint(-127, 128, (24, 32), dtype=torch.int8))
        self.scale = torch.nn.Parameter(torch.rand(24, 1) * 0.01)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(x, self.w_int8.float() * self.scale)


def test_int8_weight_cast_is_declined_by_the_size_rule() -> None:
    """Only float sources count at the folded element size: an int8 weight would fold to
    four times its bytes, so it is declined (quantized GEMMs are the way to keep it int8)."""
    torch.manual_seed(0)
    model, x = _Int8Weight().eval(), torch.randn(4, 32)
    lowered = lower_folding(model, (x,))
    # Not folded: the linear is delegated reading its weight computed at run time.
    (row,) = xnnfold.explain(lowered.edge).rows
    assert row.delegated and not row.folded
    assert "would grow the program" in (row.reason or ""), row
    assert model.w_int8.numpy().tobytes() in lowered.buffer
    (out,) = xnnfold.run_pte(lowered.buffer, (x,))
    torch.testing.assert_close(out, model(x), atol=1e-5, rtol=1e-5)


def test_wavlm_projections_delegated_only_by_xnnfold() -> None:
    """The q/k/v bias is ``cat((q_bias, zeros_like(v_bias), v_bias))`` and the packed weight
    is transposed before ``addmm``: stock leaves both projections on portable."""
    fixture = fixture_by_name("wavlm_attention")
    stock = lower_stock(fixture.model(), fixture.inputs()).summary
    assert stock.outside_ops["addmm"] == 1 and stock.outside_ops["mm"] == 1, stock
    assert lowered_folding("wavlm_attention").summary.fully_delegated


def test_zero_fill_counts_as_a_source_in_the_size_rule() -> None:
    """The folded bias holds 3 * dim values from 2 * dim parameters plus a zeros_like:
    the fill is part of what the computation reads, so the bias folds."""
    model = fixture_by_name("wavlm_attention").model()
    with torch.no_grad():
        bias = torch.cat((model.q_bias, torch.zeros_like(model.v_bias), model.v_bias))
    assert bias.numpy().tobytes() in lowered_folding("wavlm_attention").buffer


def test_modulated_weight_is_declined_with_a_reason(caplog: pytest.LogCaptureFixture) -> None:
    """A per-sample weight depends on the style input: nothing to fold. The GEMM stays on
    portable, the WARNING names it and the input, and the program still matches eager.
    (The style projection's ``weight * scale`` is a constant and is folded.)"""
    fixture = fixture_by_name("modulated_conv")
    with caplog.at_level(logging.WARNING, logger=PARTITIONER_LOGGER):
        lowered = lower_folding(fixture.model(), fixture.inputs())
    assert lowered.summary.outside_ops["convolution"] == 1, lowered.summary
    graph = lowered.edge.exported_program().graph
    (conv,) = [n for n in graph.nodes if "convolution" in str(n.target)]
    assert FOLD_META_KEY not in conv.meta
    assert any(conv.name in m and "run time" in m and "'style'" in m for m in _warnings(caplog)), (
        _warnings(caplog)
    )
    _assert_matches_eager("modulated_conv", lowered.buffer)


@pytest.mark.parametrize("name", ["expanded_kernel", "repeated_kernel"])
def test_broadcast_kernel_is_declined_without_a_growth_budget(
    name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """One 4x4 kernel expand()ed or repeat()ed to 16 channels folds to 16 times its
    bytes: with NO_GROWTH it is declined by the size rule, naming the option, and still
    correct. (The default budget folds it: tests/passes/partition/test_growth_budget.py.)"""
    fixture = fixture_by_name(name)
    partitioner = XnnpackFoldingPartitioner(growth_budget=xnnfold.NO_GROWTH)
    with caplog.at_level(logging.WARNING, logger=PARTITIONER_LOGGER):
        edge = xnnfold.lower(fixture.model(), fixture.inputs(), partitioner=partitioner)
    assert xnnfold.summarize(edge).outside_ops["convolution"] == 1
    assert any("would grow the program" in m and "growth_budget" in m for m in _warnings(caplog))
    _assert_matches_eager(name, edge.to_executorch().buffer)


def test_multi_output_ops_are_not_asked_to_stay_undecomposed() -> None:
    """executorch drops multi-output ops (var_mean, native_batch_norm) from the
    keep-undecomposed list with an "aliases output" warning; xnnfold no longer asks."""
    aten = torch.ops.aten
    assert keepable(aten._weight_norm.default)
    assert not keepable(aten.var_mean.correction)
    assert not keepable(aten.native_batch_norm.default)


class _FusedVarMean(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = VarMeanStdConv2d(4, 4, fused=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def test_fused_var_mean_is_not_requested_to_stay_undecomposed() -> None:
    """The old check asked for ``var_mean`` (a foldable op in the decomposition table),
    which executorch then refused with an "aliases output" warning."""
    torch.manual_seed(0)
    ep = torch.export.export(_FusedVarMean().eval(), (torch.randn(1, 4, 6, 6),))
    assert any("var_mean" in str(n.target) for n in ep.graph.nodes)
    ops, _ = XnnpackFoldingPartitioner().ops_to_not_decompose(ep)
    assert not [op for op in ops if "var_mean" in str(op)], ops


def _lowering_error(lower: object, model: torch.nn.Module, x: torch.Tensor) -> str:
    with pytest.raises(Exception) as info:
        lower(model, (x,))  # type: ignore[operator]
    return str(info.value)


def test_fused_var_mean_fails_in_to_edge_with_or_without_xnnfold() -> None:
    """executorch 1.5.1 decomposes ``var_mean.dim`` into the non-core ``var_mean.correction``
    and cannot keep it; the same error with the stock partitioner (an upstream limit)."""
    torch.manual_seed(0)
    x = torch.randn(1, 4, 6, 6)
    stock = _lowering_error(lower_stock, _FusedVarMean().eval(), x)
    ours = _lowering_error(lower_folding, _FusedVarMean().eval(), x)
    assert "var_mean.correction" in stock and "var_mean.correction" in ours


class _TanhGeluAfterWeightNorm(torch.nn.Module):
    """A weight-normed identity linear, then tanh GELU: the GELU sees the input exactly."""

    def __init__(self, features: int) -> None:
        super().__init__()
        linear = torch.nn.Linear(features, features, bias=False)
        with torch.no_grad():
            linear.weight.copy_(torch.eye(features))
        self.linear = torch.nn.utils.parametrizations.weight_norm(linear)
        self.gelu = torch.nn.GELU(approximate="tanh")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gelu(self.linear(x))


_GELU_INPUT = torch.tensor([[-2.7, -1.0, 0.5, 1.5, 2.7, 4.0]])


@functools.cache
def _tanh_gelu_outputs() -> tuple[torch.Tensor, torch.Tensor]:
    """xnnfold's and stock's programs of `_TanhGeluAfterWeightNorm`, run on `_GELU_INPUT`."""
    x = _GELU_INPUT
    model = _TanhGeluAfterWeightNorm(x.shape[1]).eval()
    ours = xnnfold.run_pte(lower_folding(model, (x,)).buffer, (x,))[0]
    stock = xnnfold.run_pte(lower_stock(model, (x,)).buffer, (x,))[0]
    return ours, stock


def test_tanh_gelu_after_a_fold_is_tanh_gelu() -> None:
    """The fold and the exact tanh GELU in one delegate: both run in its preprocess, and
    the program computes eager's tanh GELU whatever the installed serializer has."""
    ours, _ = _tanh_gelu_outputs()
    tanh_gelu = torch.nn.functional.gelu(_GELU_INPUT, approximate="tanh")
    torch.testing.assert_close(ours, tanh_gelu, atol=1e-6, rtol=0)


def test_stock_runs_tanh_gelu_as_the_installed_serializer_has_it() -> None:
    """Exact GELU where the XNNPACK serializer has no approximate GELU node (executorch
    1.5.1 drops ``approximate``; docs/limits.md), tanh GELU where it has one."""
    _, stock = _tanh_gelu_outputs()
    tanh_gelu = torch.nn.functional.gelu(_GELU_INPUT, approximate="tanh")
    exact_gelu = torch.nn.functional.gelu(_GELU_INPUT)
    assert (tanh_gelu - exact_gelu).abs().max() > 4e-4  # the input tells the two apart
    if hasattr(xnnpack_graph_schema, "XNNApproxGelu"):
        torch.testing.assert_close(stock, tanh_gelu, atol=1e-5, rtol=0)
    else:
        torch.testing.assert_close(stock, exact_gelu, atol=1e-5, rtol=0)


def test_dac_codebook_matmul_is_delegated_without_a_copy() -> None:
    """The codebook is also read by the embedding lookup, so folding its normalized copy
    would store both: the mm is delegated with its weight computed at run time instead
    (XNNPACK's fully-connected op takes one), and the program keeps one codebook."""
    lowered = lowered_folding("dac_codebook")
    assert lowered.summary.outside_ops["mm"] == 0
    (row,) = [r for r in xnnfold.explain(lowered.edge).rows if r.op == "mm"]
    assert row.delegated and not row.folded
    assert "computed at run time, not folded" in (row.reason or "")
    fixture = fixture_by_name("dac_codebook")
    stock = lower_stock(fixture.model(), fixture.inputs())
    assert stock.summary.outside_ops["mm"] == 1
    assert len(lowered.buffer) <= len(stock.buffer)


def test_dac_codebook_matches_eager() -> None:
    _assert_matches_eager("dac_codebook", lowered_folding("dac_codebook").buffer)


# Weight norm at scale and reused modules.


@pytest.mark.parametrize("name", ["reused_weight_norm", "reused_weight_norm_conv1d"])
def test_reused_module_matches_eager(name: str) -> None:
    _assert_matches_eager(name, lowered_folding(name).buffer)


@pytest.mark.parametrize("name", ["reused_weight_norm", "reused_weight_norm_conv1d"])
def test_reused_module_is_fully_delegated(name: str) -> None:
    summary = lowered_folding(name).summary
    assert summary.fully_delegated, summary.outside_ops_text()


@pytest.mark.campaign
def test_hundred_weight_norm_layers() -> None:
    """100 weight_norm layers from one comprehension: one delegate, equal to hand-folded
    (about a minute of lowering each way)."""
    name = "hundred_weight_norm"
    lowered = lowered_folding(name)
    assert lowered.summary.fully_delegated, lowered.summary.outside_ops_text()
    _assert_matches_eager(name, lowered.buffer)
    inputs = fixture_by_name(name).inputs()
    (ours,) = xnnfold.run_pte(lowered.buffer, inputs)
    (theirs,) = xnnfold.run_pte(lowered_hand_folded(name).buffer, inputs)
    assert torch.equal(ours, theirs)
