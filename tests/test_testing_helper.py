"""`xnnfold.testing.assert_fully_delegated`: passes on a folded model, fails with the table.

Each failing case fails for a real reason: a GEMM whose weight is computed from the input
(XNNPACK needs a constant weight), a float64 GEMM (XNNPACK's GEMMs are fp32), a tolerance
the real XNNPACK-vs-eager error exceeds, and an output that export froze from Python state.
The numbers in each message are checked against a separate lowering run through
``executorch.runtime``.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrize

import xnnfold
from xnnfold.fixtures import layer_fixture
from xnnfold.testing import _compare_outputs, assert_fully_delegated, DelegationCheck

# The full tier: the fast tier covers each rule in tests/passes/analysis and end to end once.
pytestmark = [pytest.mark.runtime, pytest.mark.slow]

WN_CONV = layer_fixture("weight_norm_dim0", "conv1d")


class PerSampleWeightConv(nn.Module):
    """A conv whose weight is scaled by a statistic of the input: not a constant."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(8, 16, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv1d(x, self.conv.weight * x.abs().mean(), self.conv.bias, padding=1)


class CountsCalls(nn.Module):
    """Second output depends on a Python counter, which export freezes at trace time."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = WN_CONV.model()
        self.calls = 0

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.calls += 1
        return self.conv(x), x * self.calls


class ConvThenCumsum(nn.Module):
    """A folded conv followed by cumsum, which XNNPACK has no kernel for."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = WN_CONV.model()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(self.conv(x), dim=-1)


def _per_sample() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    return PerSampleWeightConv().eval(), (torch.randn(1, 8, 32),)


def _float64() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    return WN_CONV.model().double(), tuple(x.double() for x in WN_CONV.inputs())


def _independent_table(model: nn.Module, inputs: tuple[torch.Tensor, ...]) -> str:
    return xnnfold.explain(xnnfold.lower(model, inputs)).table()


def test_passes_on_weight_norm_conv() -> None:
    model, inputs = WN_CONV.model(), WN_CONV.inputs()
    check = assert_fully_delegated(model, inputs)

    assert isinstance(check, DelegationCheck)
    (row,) = check.report.rows
    assert row.delegated and row.folded == ("weight",)
    (out,) = xnnfold.run_pte(check.buffer, inputs)
    with torch.no_grad():
        expected = WN_CONV.model()(*inputs)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    assert check.max_abs_error == pytest.approx(float((out - expected).abs().max()))


class TiedHead(nn.Module):
    """A lookup and a linear sharing one table: stored once, in a `.ptd` the `.pte` needs."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(256, 16)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return F.linear(torch.tanh(self.emb(ids)), self.emb.weight)


def test_passes_on_a_tied_table_stored_beside_the_pte() -> None:
    torch.manual_seed(0)
    model, ids = TiedHead().eval(), torch.randint(0, 256, (5,))
    check = assert_fully_delegated(
        model, (ids,), partitioner=xnnfold.XnnpackFoldingPartitioner(tie_tables=True)
    )

    assert xnnfold.data_files(check.program) == ("_default_external_constant.ptd",)
    assert check.max_abs_error is not None and check.max_abs_error <= 1e-5


def _prepare_state(model: nn.Module) -> list[object]:
    """Everything `prepare_for_xnnpack` touches: the parametrization lists' classes and
    hooks, the legacy hooks' classes."""
    state: list[object] = []
    for module in model.modules():
        if parametrize.is_parametrized(module):
            for plist in module.parametrizations.values():
                state.append(type(plist).__name__)
                state.append((len(plist._forward_pre_hooks), len(plist._forward_hooks)))
        state.extend(type(hook).__name__ for hook in module._forward_pre_hooks.values())
    return state


@pytest.mark.parametrize("norm", ["weight_norm_dim0", "legacy_weight_norm"])
@pytest.mark.parametrize("prepared_before", [False, True])
def test_leaves_the_model_as_it_was_passed(norm: str, prepared_before: bool) -> None:
    fixture = layer_fixture(norm, "conv1d")
    model = fixture.model()
    unprepared = _prepare_state(model)
    if prepared_before:
        xnnfold.prepare_for_xnnpack(model)
    before = _prepare_state(model)
    assert (before == unprepared) is not prepared_before

    assert_fully_delegated(model, fixture.inputs())

    assert _prepare_state(model) == before


@pytest.mark.parametrize("build", [_per_sample, _float64], ids=["per_sample_weight", "float64"])
def test_fails_when_a_gemm_stays_outside(build) -> None:
    model, inputs = build()
    with pytest.raises(AssertionError) as info:
        assert_fully_delegated(model, inputs)

    message = str(info.value)
    assert "1 GEMM(s) left outside a delegate" in message
    assert "aten_convolution_default (convolution)" in message
    assert _independent_table(*build()) in message


def test_fails_when_outputs_exceed_the_tolerance() -> None:
    inputs = WN_CONV.inputs()
    with pytest.raises(AssertionError) as info:
        assert_fully_delegated(WN_CONV.model(), inputs, atol=0.0, rtol=0.0)

    edge = xnnfold.lower(WN_CONV.model(), inputs)
    (out,) = xnnfold.run_pte(edge.to_executorch().buffer, inputs)
    with torch.no_grad():
        error = float((out - WN_CONV.model()(*inputs)).abs().max())
    assert error > 0.0  # XNNPACK sums in another order than eager PyTorch
    message = str(info.value)
    assert f"output 0: max abs error {error:.3e}" in message
    assert "left outside a delegate" not in message
    assert xnnfold.explain(edge).table() in message


def test_names_the_output_that_differs() -> None:
    inputs = WN_CONV.inputs()
    with pytest.raises(AssertionError) as info:
        assert_fully_delegated(CountsCalls().eval(), inputs)

    message = str(info.value)
    assert "output 1: max abs error" in message
    assert "output 0" not in message


def test_check_outputs_false_skips_the_comparison() -> None:
    check = assert_fully_delegated(
        WN_CONV.model(), WN_CONV.inputs(), atol=0.0, rtol=0.0, check_outputs=False
    )
    assert check.max_abs_error is None


@pytest.mark.parametrize("all_ops", [False, True])
def test_all_ops_also_fails_on_other_ops_outside(all_ops: bool) -> None:
    model, inputs = ConvThenCumsum().eval(), WN_CONV.inputs()
    if not all_ops:
        check = assert_fully_delegated(model, inputs)
        assert check.summary.outside_ops["cumsum"] == 1
        return
    with pytest.raises(AssertionError, match="ops left outside delegates: cumsum"):
        assert_fully_delegated(model, inputs, all_ops=True)


def test_rejects_inputs_that_are_not_a_tuple() -> None:
    with pytest.raises(TypeError, match=r"wrap a single tensor as \(x,\)"):
        assert_fully_delegated(WN_CONV.model(), WN_CONV.inputs()[0])


NAN = float("nan")


@pytest.mark.parametrize(
    ("actual", "expected", "problem"),
    [
        ([torch.tensor([NAN, 1.0])], torch.tensor([NAN, 1.0]), None),
        ([torch.tensor([NAN, 1.0])], torch.tensor([0.0, 1.0]), "max abs error inf"),
        (
            [torch.zeros(2, 3)],
            torch.zeros(3, 2),
            "torch.float32 (2, 3), eager torch.float32 (3, 2)",
        ),
        (
            [torch.zeros(2)],
            (torch.zeros(2), torch.zeros(2)),
            ".pte returned 1 outputs, eager 2",
        ),
    ],
    ids=["nan_both_sides", "nan_one_side", "shape", "count"],
)
def test_compare_outputs(actual: list, expected, problem) -> None:
    _, mismatches = _compare_outputs(actual, expected, atol=1e-5, rtol=1e-5)
    if problem is None:
        assert mismatches == []
    else:
        (mismatch,) = mismatches
        assert problem in str(mismatch)
