"""tanh GELU computed exactly inside the delegate (`passes/fold/_tanh_gelu.py`).

executorch 1.5.1's XNNPACK serializer writes ``gelu(approximate="tanh")`` as exact GELU;
the folding partitioner marks each tanh GELU it delegates, and preprocess writes it as
``x * sigmoid(x * (A + B * x^2))``. Each claim here is checked by running the program
through executorch.runtime against eager."""

from __future__ import annotations

import functools
from typing import Callable

import pytest
import torch
from executorch.backends.xnnpack._passes.channels_last_tagged_reshape_pass import (
    ChannelsLastTaggedReshapePass,
)
from executorch.exir import to_edge
from executorch.exir.delegate import executorch_call_delegate
from torch import nn
from torch.export import ExportedProgram

import xnnfold
from xnnfold._meta import FOLD_META_KEY
from xnnfold._upstream import exir_ops, serializes_tanh_gelu
from xnnfold.passes._marks import tanh_gelu_mark_of, TanhGeluMark
from xnnfold.passes.fold import _tanh_gelu
from xnnfold.passes.fold._tanh_gelu import (
    ExactTanhGeluPass,
    needs_exact_tanh_gelu,
    TANH_GELU_A,
    TANH_GELU_B,
)
from xnnfold.passes.partition._findings import NO_FINDINGS
from xnnfold.passes.partition._outcome import write_fold_marks

from tests._lowering import lower_folding, lower_stock

# Where tanh GELU and exact GELU differ most (4.7e-4 at |x| = 2.7), and far out.
_LINE = torch.linspace(-10.0, 10.0, 20001).reshape(1, -1)
# The 1.5.1 serializer has no tanh GELU: there the fix is what these tests check.
_STOCK_IS_EXACT = not serializes_tanh_gelu()


class _Gelu(nn.Module):
    def __init__(self, approximate: str) -> None:
        super().__init__()
        self.gelu = nn.GELU(approximate=approximate)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gelu(x)


class _ConvGelu(nn.Module):
    """A convolution then tanh GELU, NCHW: the layout pass of XNNPACK preprocess runs."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.gelu(self.conv(x), approximate="tanh")


def _assert_one_delegate_like_eager(model: nn.Module, x: torch.Tensor) -> None:
    """xnnfold's program of ``model`` runs as eager on ``x``, with nothing outside its
    delegates."""
    lowered = lower_folding(model, (x,))
    (out,) = xnnfold.run_pte(lowered.buffer, (x,))
    torch.testing.assert_close(out, model(x), atol=2e-5, rtol=1e-6)
    assert _top_level_ops(lowered.edge) == set()


def _edge(model: nn.Module, x: torch.Tensor) -> ExportedProgram:
    return to_edge(torch.export.export(model.eval(), (x,))).exported_program()


def _gelus(ep: ExportedProgram) -> list[torch.fx.Node]:
    return [n for n in ep.graph.nodes if n.target is exir_ops.edge.aten.gelu.default]


def _top_level_ops(edge: object) -> set[str]:
    ep = edge.exported_program()  # type: ignore[attr-defined]
    return {
        str(n.target)
        for n in ep.graph.nodes
        if n.op == "call_function"
        and n.target is not executorch_call_delegate
        and "getitem" not in str(n.target)
    }


@functools.cache
def _tanh_line() -> tuple[torch.Tensor, torch.Tensor, object]:
    """xnnfold's and stock's outputs on `_LINE`, and xnnfold's lowering."""
    model = _Gelu("tanh").eval()
    ours = lower_folding(model, (_LINE,))
    stock = lower_stock(model, (_LINE,))
    return (
        xnnfold.run_pte(ours.buffer, (_LINE,))[0],
        xnnfold.run_pte(stock.buffer, (_LINE,))[0],
        ours.edge,
    )


# -- the rule: which GELUs are marked ---------------------------------------------------


def test_an_fp32_tanh_gelu_needs_the_exact_formula() -> None:
    (gelu,) = _gelus(_edge(_Gelu("tanh"), torch.randn(2, 3)))
    assert needs_exact_tanh_gelu(gelu) is _STOCK_IS_EXACT


def test_an_exact_gelu_keeps_stocks_serialization() -> None:
    (gelu,) = _gelus(_edge(_Gelu("none"), torch.randn(2, 3)))
    assert not needs_exact_tanh_gelu(gelu)


def test_an_fp16_tanh_gelu_is_left_to_stock() -> None:
    """Stock's GELU config delegates fp32 alone; an fp16 GELU is not rewritten."""
    (gelu,) = _gelus(_edge(_Gelu("tanh").half(), torch.randn(2, 3).half()))
    assert not needs_exact_tanh_gelu(gelu)


def test_a_serializer_with_tanh_gelu_writes_it_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    (gelu,) = _gelus(_edge(_Gelu("tanh"), torch.randn(2, 3)))
    monkeypatch.setattr(_tanh_gelu, "serializes_tanh_gelu", lambda: True)
    assert not needs_exact_tanh_gelu(gelu)


def test_the_mark_goes_onto_delegated_tanh_gelus_only() -> None:
    ep = _edge(_Gelu("tanh"), torch.randn(2, 3))
    (gelu,) = _gelus(ep)
    options = xnnfold.passes.FoldOptions()
    write_fold_marks(ep, NO_FINDINGS, options, frozenset(), tanh_gelus={gelu.name})
    assert tanh_gelu_mark_of(gelu) is None  # not delegated
    write_fold_marks(ep, NO_FINDINGS, options, {gelu.name}, tanh_gelus={gelu.name})
    assert tanh_gelu_mark_of(gelu) == TanhGeluMark()


def test_the_formula_is_tanh_gelu_in_double_precision() -> None:
    x = torch.linspace(-10, 10, 2001, dtype=torch.float64)
    formula = x * torch.sigmoid(x * (TANH_GELU_A + TANH_GELU_B * x * x))
    eager = nn.functional.gelu(x, approximate="tanh")
    torch.testing.assert_close(formula, eager, atol=1e-12, rtol=0)


# -- the pass -----------------------------------------------------------------------------


def test_the_pass_rewrites_marked_gelus_once() -> None:
    ep = _edge(_Gelu("tanh"), torch.randn(2, 3))
    (gelu,) = _gelus(ep)
    gelu.meta[FOLD_META_KEY] = TanhGeluMark()
    x = torch.randn(2, 3) * 4
    assert ExactTanhGeluPass(ep)(ep.graph_module).modified
    assert not _gelus(ep)
    torch.testing.assert_close(
        ep.module()(x), nn.functional.gelu(x, approximate="tanh"), atol=1e-6, rtol=0
    )
    assert not ExactTanhGeluPass(ep)(ep.graph_module).modified


def test_the_pass_leaves_unmarked_gelus_alone() -> None:
    ep = _edge(_Gelu("tanh"), torch.randn(2, 3))
    assert not ExactTanhGeluPass(ep)(ep.graph_module).modified
    assert len(_gelus(ep)) == 1


# -- through the runtime --------------------------------------------------------------------


@pytest.mark.runtime
def test_tanh_gelu_matches_eager_on_minus_10_to_10() -> None:
    ours, _, _ = _tanh_line()
    eager = nn.functional.gelu(_LINE, approximate="tanh")
    assert (ours - eager).abs().max().item() <= 1e-6


@pytest.mark.runtime
@pytest.mark.skipif(not _STOCK_IS_EXACT, reason="the installed serializer writes tanh GELU")
def test_stock_computes_exact_gelu_where_xnnfold_computes_tanh_gelu() -> None:
    """What the fix is for: stock's program is off by 4.7e-4, the gap between the two."""
    _, stock, _ = _tanh_line()
    exact = nn.functional.gelu(_LINE)
    tanh = nn.functional.gelu(_LINE, approximate="tanh")
    assert (stock - exact).abs().max().item() <= 1e-5
    assert (stock - tanh).abs().max().item() > 4e-4


@pytest.mark.runtime
def test_tanh_gelu_stays_in_its_one_delegate_and_explain_names_it() -> None:
    _, _, edge = _tanh_line()
    assert _top_level_ops(edge) == set()
    report = xnnfold.explain(edge)
    assert [row.node for row in report.exact_gelus] == (["aten_gelu_default"] * _STOCK_IS_EXACT)
    if _STOCK_IS_EXACT:
        assert "1 tanh GELUs computed as tanh GELU" in str(report)


@pytest.mark.runtime
@pytest.mark.slow
def test_tanh_gelu_after_a_convolution_matches_eager() -> None:
    _assert_one_delegate_like_eager(_ConvGelu().eval(), torch.randn(2, 3, 12, 12) * 3)


class _ConvGeluConv(nn.Module):
    """tanh GELU between two convolutions: inside XNNPACK's channels-last region."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.expand = nn.Conv2d(3, 8, 1)
        self.project = nn.Conv2d(8, 3, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.project(nn.functional.gelu(self.expand(x), approximate="tanh"))


def _activation_copies(
    lower: Callable[[nn.Module, tuple[torch.Tensor, ...]], object],
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[int, object]:
    """How many tensors of more than one element XNNPACK's layout pass copies between
    layouts when ``lower`` lowers `_ConvGeluConv`, and the lowering."""
    copies: list[torch.fx.Node] = []
    original = ChannelsLastTaggedReshapePass.call

    def spy(self: ChannelsLastTaggedReshapePass, graph_module: torch.fx.GraphModule) -> object:
        result = original(self, graph_module)
        copies.extend(
            node
            for node in result.graph_module.graph.nodes
            if node.target is exir_ops.edge.aten._to_copy.default and node.meta["val"].numel() > 1
        )
        return result

    with monkeypatch.context() as patch:
        patch.setattr(ChannelsLastTaggedReshapePass, "call", spy)
        lowered = lower(_ConvGeluConv().eval(), (torch.randn(1, 3, 10, 10) * 3,))
    return len(copies), lowered


@pytest.mark.runtime
@pytest.mark.slow
@pytest.mark.skipif(not _STOCK_IS_EXACT, reason="the installed serializer writes tanh GELU")
def test_a_channels_last_tanh_gelu_copies_no_activation_stock_does_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The formula's constants must not send the activation to channels-first and back
    around each GELU: that cost twice stock's latency on a MaxViT block."""
    stock, _ = _activation_copies(lower_stock, monkeypatch)
    ours, lowered = _activation_copies(lower_folding, monkeypatch)
    assert ours == stock == 2  # the input in, the output out
    x = torch.randn(1, 3, 10, 10) * 3
    (out,) = xnnfold.run_pte(lowered.buffer, (x,))  # type: ignore[attr-defined]
    torch.testing.assert_close(out, _ConvGeluConv().eval()(x), atol=2e-5, rtol=1e-6)


class _TwoRanks(nn.Module):
    """tanh GELU on a 4-D and on a 2-D activation of one delegate."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3)
        self.head = nn.Linear(4 * 4 * 4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = nn.functional.gelu(self.conv(x), approximate="tanh").flatten(1)
        return nn.functional.gelu(self.head(hidden), approximate="tanh")


@pytest.mark.runtime
@pytest.mark.slow
def test_tanh_gelus_of_two_ranks_in_one_delegate_match_eager() -> None:
    _assert_one_delegate_like_eager(_TwoRanks().eval(), torch.randn(2, 3, 6, 6) * 3)


@pytest.mark.runtime
@pytest.mark.slow
def test_tanh_gelu_with_a_dynamic_length_matches_eager() -> None:
    model = _Gelu("tanh").eval()
    length = torch.export.Dim("length", min=2, max=64)
    lowered = lower_folding(model, (torch.randn(1, 8),), {"x": {1: length}})
    for n in (3, 64):
        x = torch.randn(1, n) * 4
        (out,) = xnnfold.run_pte(lowered.buffer, (x,))
        torch.testing.assert_close(out, model(x), atol=1e-6, rtol=0)


@pytest.mark.runtime
@pytest.mark.slow
def test_an_exact_gelu_program_is_stocks_byte_for_byte() -> None:
    model = _Gelu("none").eval()
    x = torch.randn(2, 16)
    assert lower_folding(model, (x,)).buffer == lower_stock(model, (x,)).buffer


@pytest.mark.runtime
@pytest.mark.slow
def test_a_stock_lowering_after_xnnfold_keeps_stocks_gelu() -> None:
    """The preprocess hook, installed by the folding lowering, rewrites only marked
    GELUs: a stock lowering of a tanh GELU gives stock's program, byte for byte."""
    model = _Gelu("tanh").eval()
    x = torch.randn(2, 16)
    xnnfold.uninstall_preprocess_hook()
    before = lower_stock(model, (x,)).buffer
    lower_folding(model, (x,))
    assert xnnfold.is_preprocess_hook_installed()
    assert lower_stock(model, (x,)).buffer == before
