"""addmm's beta, alpha and bias shape are honoured, or the addmm stays on portable.

XNNPACK serializes an addmm as a fully-connected op (``x @ W + b`` with one bias value per
output channel): executorch's stock config drops ``beta`` and ``alpha`` and reads any bias
as per channel. The folding partitioner multiplies the scales into the weight and bias
constants (for plain parameters and folded computations alike) and declines a bias XNNPACK
cannot add. Each case runs the `.pte` through executorch.runtime against eager.
"""

from __future__ import annotations

from typing import Optional

import pytest
import torch
from torch import nn

import xnnfold
from xnnfold import XnnpackFoldingPartitioner
from xnnfold.passes._marks import fold_mark_of

from tests._lowering import lower_stock

# The full tier: the fast tier covers each rule in tests/passes/analysis and end to end once.
pytestmark = [pytest.mark.runtime, pytest.mark.slow]

IN_FEATURES, OUT_FEATURES, BATCH = 16, 8, 4


class ScaledAddmm(nn.Module):
    """``torch.addmm(b, x, W, beta=..., alpha=...)`` with W and b plain or computed."""

    def __init__(
        self,
        *,
        beta: float,
        alpha: float,
        computed_weight: bool,
        computed_bias: bool,
        bias_shape: tuple[int, ...] = (OUT_FEATURES,),
        weight: Optional[torch.Tensor] = None,
        bias: Optional[torch.Tensor] = None,
    ) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(7)
        self.weight = nn.Parameter(
            torch.randn(IN_FEATURES, OUT_FEATURES, generator=generator)
            if weight is None
            else weight
        )
        self.bias = nn.Parameter(
            torch.randn(bias_shape, generator=generator) if bias is None else bias
        )
        self.beta, self.alpha = beta, alpha
        self.computed_weight, self.computed_bias = computed_weight, computed_bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight * 1.5 if self.computed_weight else self.weight
        bias = self.bias - 0.25 if self.computed_bias else self.bias
        return torch.addmm(bias, x, weight, beta=self.beta, alpha=self.alpha)


def _inputs() -> tuple[torch.Tensor]:
    return (torch.randn(BATCH, IN_FEATURES, generator=torch.Generator().manual_seed(3)),)


def _run(model: nn.Module, **options: bool) -> tuple[torch.Tensor, xnnfold.ProgramSummary, bytes]:
    edge = xnnfold.lower(model, _inputs(), partitioner=XnnpackFoldingPartitioner(**options))
    buffer = edge.to_executorch().buffer
    return xnnfold.run_pte(buffer, _inputs())[0], xnnfold.summarize(edge), buffer


def _hand_folded(
    beta: float, alpha: float, computed_weight: bool, computed_bias: bool
) -> nn.Module:
    """The twin that holds ``alpha * W`` and ``beta * b`` as its parameters."""
    source = ScaledAddmm(
        beta=beta, alpha=alpha, computed_weight=computed_weight, computed_bias=computed_bias
    )
    with torch.no_grad():
        weight = source.weight * 1.5 if computed_weight else source.weight.clone()
        bias = source.bias - 0.25 if computed_bias else source.bias.clone()
        weight = weight * alpha
        bias = torch.zeros_like(bias) if beta == 0 else bias * beta
    return ScaledAddmm(
        beta=1.0,
        alpha=1.0,
        computed_weight=False,
        computed_bias=False,
        weight=weight,
        bias=bias,
    ).eval()


SCALES = [(0.5, 2.0), (1.0, 2.0), (0.5, 1.0), (-1.5, 0.5), (0.0, 3.0), (2.0, 0.0)]


@pytest.mark.parametrize("computed_bias", [False, True], ids=["param_bias", "computed_bias"])
@pytest.mark.parametrize("computed_weight", [False, True], ids=["param_weight", "computed_weight"])
@pytest.mark.parametrize(("beta", "alpha"), SCALES, ids=[f"beta{b}_alpha{a}" for b, a in SCALES])
def test_scaled_addmm_is_delegated_and_matches_eager(
    beta: float, alpha: float, computed_weight: bool, computed_bias: bool
) -> None:
    model = ScaledAddmm(
        beta=beta, alpha=alpha, computed_weight=computed_weight, computed_bias=computed_bias
    ).eval()
    out, summary, _ = _run(model)
    assert summary.fully_delegated, summary
    torch.testing.assert_close(out, model(*_inputs()), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("computed_weight", [False, True], ids=["param_weight", "computed_weight"])
@pytest.mark.parametrize(("beta", "alpha"), SCALES, ids=[f"beta{b}_alpha{a}" for b, a in SCALES])
def test_scaled_addmm_equals_the_hand_folded_twin_bitwise(
    beta: float, alpha: float, computed_weight: bool
) -> None:
    model = ScaledAddmm(
        beta=beta, alpha=alpha, computed_weight=computed_weight, computed_bias=True
    ).eval()
    out, _, buffer = _run(model)
    twin = lower_stock(_hand_folded(beta, alpha, computed_weight, True), _inputs())
    assert torch.equal(out, xnnfold.run_pte(twin.buffer, _inputs())[0])
    assert len(buffer) <= len(twin.buffer)


def test_a_nan_bias_is_ignored_when_beta_is_zero() -> None:
    bias = torch.full((OUT_FEATURES,), float("nan"))
    model = ScaledAddmm(
        beta=0.0, alpha=2.0, computed_weight=False, computed_bias=False, bias=bias
    ).eval()
    out, summary, _ = _run(model)
    assert summary.fully_delegated
    assert not out.isnan().any()
    torch.testing.assert_close(out, model(*_inputs()))


def test_the_scales_leave_the_delegate_as_a_plain_addmm() -> None:
    """Nothing of beta and alpha is left for the XNNPACK serializer to drop."""
    from executorch.exir.lowered_backend_module import get_lowered_submodules

    model = ScaledAddmm(beta=0.5, alpha=2.0, computed_weight=False, computed_bias=False)
    edge = xnnfold.lower(model.eval(), _inputs())
    ((_, lowered, _),) = get_lowered_submodules(edge.exported_program().graph_module)
    marks = [fold_mark_of(n) for n in lowered.original_module.graph.nodes]
    assert [m.scales for m in marks if m is not None] == [((0, 0.5), (2, 2.0))]


@pytest.mark.parametrize(
    "bias_shape", [(OUT_FEATURES,), (1, OUT_FEATURES)], ids=["per_channel", "row"]
)
def test_a_per_channel_bias_is_delegated(bias_shape: tuple[int, ...]) -> None:
    model = ScaledAddmm(
        beta=1.0, alpha=1.0, computed_weight=False, computed_bias=False, bias_shape=bias_shape
    ).eval()
    out, summary, _ = _run(model)
    assert summary.fully_delegated
    torch.testing.assert_close(out, model(*_inputs()))


BROADCAST_BIASES = [(), (1,), (BATCH, 1), (BATCH, OUT_FEATURES), (1, 1)]


@pytest.mark.parametrize("bias_shape", BROADCAST_BIASES, ids=str)
def test_a_bias_xnnpack_cannot_add_stays_on_portable_with_a_reason(
    bias_shape: tuple[int, ...], caplog: pytest.LogCaptureFixture
) -> None:
    model = ScaledAddmm(
        beta=1.0, alpha=1.0, computed_weight=False, computed_bias=False, bias_shape=bias_shape
    ).eval()
    edge = xnnfold.lower(model, _inputs())
    out = xnnfold.run_pte(edge.to_executorch().buffer, _inputs())[0]
    torch.testing.assert_close(out, model(*_inputs()))
    (row,) = xnnfold.explain(edge).outside
    assert "per output channel" in (row.reason or "")
    assert "per output channel" in caplog.text


def test_scales_on_a_run_time_bias_stay_on_portable() -> None:
    class RunTimeBias(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.randn(IN_FEATURES, OUT_FEATURES))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.addmm(x[0, :OUT_FEATURES], x, self.weight, beta=0.5, alpha=2.0)

    model = RunTimeBias().eval()
    edge = xnnfold.lower(model, _inputs())
    out = xnnfold.run_pte(edge.to_executorch().buffer, _inputs())[0]
    torch.testing.assert_close(out, model(*_inputs()))
    (row,) = xnnfold.explain(edge).outside
    assert "beta=0.5" in (row.reason or "")


def test_scales_stay_on_portable_with_run_time_weights() -> None:
    model = ScaledAddmm(beta=0.5, alpha=2.0, computed_weight=True, computed_bias=False).eval()
    edge = xnnfold.lower(
        model,
        _inputs(),
        partitioner=XnnpackFoldingPartitioner(force_non_static_weights_for_f32_linear=True),
    )
    out = xnnfold.run_pte(edge.to_executorch().buffer, _inputs())[0]
    torch.testing.assert_close(out, model(*_inputs()))
    (row,) = xnnfold.explain(edge).outside
    assert "force_non_static_weights_for_f32_linear" in (row.reason or "")


def test_scales_stay_on_portable_with_folding_off() -> None:
    model = ScaledAddmm(beta=0.5, alpha=2.0, computed_weight=False, computed_bias=False).eval()
    out, summary, _ = _run(model, fold=False)
    torch.testing.assert_close(out, model(*_inputs()), atol=1e-5, rtol=1e-5)
    assert summary.outside_ops["addmm"] == 1


def test_an_unscaled_addmm_lowers_as_with_the_stock_partitioner() -> None:
    model = ScaledAddmm(beta=1.0, alpha=1.0, computed_weight=False, computed_bias=False).eval()
    _, _, buffer = _run(model)
    assert buffer == lower_stock(model, _inputs()).buffer


def test_a_dynamic_batch_bias_stays_on_portable() -> None:
    class BatchBias(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.randn(IN_FEATURES, OUT_FEATURES))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.addmm(x[:, :OUT_FEATURES] * 0, x, self.weight)

    model = BatchBias().eval()
    batch = torch.export.Dim("batch", min=2, max=16)
    edge = xnnfold.lower(model, _inputs(), dynamic_shapes=({0: batch},))
    program = edge.to_executorch()
    for rows in (2, 5):
        x = torch.randn(rows, IN_FEATURES)
        torch.testing.assert_close(xnnfold.run_pte(program.buffer, (x,))[0], model(x))


def test_a_scaled_unmutated_buffer_bias_is_folded() -> None:
    class BufferBias(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.randn(IN_FEATURES, OUT_FEATURES))
            self.register_buffer("bias", torch.randn(OUT_FEATURES))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.addmm(self.bias, x, self.weight, beta=-1.5)

    model = BufferBias().eval()
    out, summary, _ = _run(model)
    assert summary.fully_delegated
    torch.testing.assert_close(out, model(*_inputs()), atol=1e-5, rtol=1e-5)


def test_a_declined_addmm_keeps_nothing_of_its_weight_undecomposed() -> None:
    """Found by the differential tester: spectral_norm's ``mv`` was kept undecomposed
    for an addmm the argument rules then declined, and lowering stopped."""

    class SpectralAddmm(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.holder = torch.nn.utils.parametrizations.spectral_norm(
                nn.Linear(OUT_FEATURES, IN_FEATURES)
            )
            self.bias = nn.Parameter(torch.tensor(0.5))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.addmm(self.bias, x, self.holder.weight)

    model = SpectralAddmm().eval()
    edge = xnnfold.lower(model, _inputs())
    (row,) = xnnfold.explain(edge).outside
    assert "per output channel" in (row.reason or "")
    out = xnnfold.run_pte(edge.to_executorch().buffer, _inputs())[0]
    torch.testing.assert_close(out, model(*_inputs()), atol=1e-5, rtol=1e-5)


class TransposedScaledAddmm(nn.Module):
    """``addmm(b, x, W.t())``: the weight reaches the delegate as a transpose of a
    constant, which the fold keeps (XNNPACK turns it back into a linear)."""

    def __init__(self, *, computed: bool) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(8)
        self.weight = nn.Parameter(torch.randn(OUT_FEATURES, IN_FEATURES, generator=generator))
        self.bias = nn.Parameter(torch.randn(OUT_FEATURES, generator=generator))
        self.computed = computed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight * 1.0001 if self.computed else self.weight
        return torch.addmm(self.bias, x, weight.t(), beta=0.5, alpha=2.0)


@pytest.mark.parametrize("computed", [False, True], ids=["param_weight", "computed_weight"])
def test_a_scaled_transposed_weight_is_delegated_and_matches_eager(computed: bool) -> None:
    model = TransposedScaledAddmm(computed=computed).eval()
    out, summary, _ = _run(model)
    assert summary.fully_delegated, summary
    torch.testing.assert_close(out, model(*_inputs()), atol=1e-5, rtol=1e-5)
