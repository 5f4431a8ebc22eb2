"""The architecture fixtures, each lowered with xnnfold and run against eager.

What stock leaves on the portable kernels because of a computed weight, xnnfold must
delegate; the program must compute what the hand-folded model computes (bit for bit: the
fold runs the very ops eager ran to make the hand-folded parameters) and be no larger.
GEMMs whose weight depends on the input (StyleGAN's modulated conv) stay outside with
either partitioner, and xnnfold must say why.

The xnnfold lowering of each model is shared by the unmarked tests; the stock and
hand-folded lowerings are two more per model, so the tests that need them are slow.
"""

from __future__ import annotations

import functools
from typing import Union

import pytest
import torch
from torch.nn.utils import parametrize

import xnnfold
from xnnfold.fixtures import FIXTURES
from xnnfold.fixtures._architectures import (
    ArchitectureFixture,
    ARCHITECTURES,
    ComputedWeightModule,
)

from tests._lowering import lower_stock, Lowered, lowered_hand_folded
from tests._tiers import campaign_unless

# The full tier: the fast tier covers each rule in tests/passes/analysis and end to end once.
pytestmark = [pytest.mark.runtime, pytest.mark.slow]

# The GEMMs XNNPACK takes only with a static weight (bmm multiplies two activations).
GEMM_OPS = frozenset({"convolution", "linear", "addmm", "mm"})

NAMES = [f.name for f in ARCHITECTURES]


def _fixture(name: str) -> ArchitectureFixture:
    fixture = FIXTURES[name]
    assert isinstance(fixture, ArchitectureFixture)
    return fixture


@functools.cache
def _lowered_or_error(
    name: str,
) -> Union[tuple[Lowered, xnnfold.XnnpackFoldingPartitioner], Exception]:
    # A lowering that raises is remembered too: every test of that model fails the same
    # way without lowering again.
    fixture = _fixture(name)
    partitioner = xnnfold.XnnpackFoldingPartitioner()
    try:
        edge = xnnfold.lower(fixture.model(), fixture.inputs(), partitioner=partitioner)
    except Exception as error:
        return error
    return Lowered(edge, edge.to_executorch().buffer, xnnfold.summarize(edge)), partitioner


def _lowered(name: str) -> Lowered:
    result = _lowered_or_error(name)
    if isinstance(result, Exception):
        raise result
    return result[0]


@functools.cache
def _lowered_stock(name: str) -> Lowered:
    fixture = _fixture(name)
    return lower_stock(fixture.model(), fixture.inputs())


def _outside_gemms(lowered: Lowered) -> int:
    return sum(n for op, n in lowered.summary.outside_ops.items() if op in GEMM_OPS)


def _computed_weight_gemms(name: str) -> int:
    """GEMMs whose weight is computed from parameters (by a parametrization or in forward)."""
    fixture = _fixture(name)
    model = fixture.model()
    computed = sum(
        1
        for module in model.modules()
        if parametrize.is_parametrized(module, "weight") or isinstance(module, ComputedWeightModule)
    )
    return computed - fixture.runtime_weight_gemms


@pytest.mark.parametrize("name", NAMES)
def test_every_gemm_with_constant_weight_is_delegated(name: str) -> None:
    lowered = _lowered(name)
    assert _outside_gemms(lowered) == _fixture(name).runtime_weight_gemms, lowered.summary


@pytest.mark.parametrize("name", NAMES)
def test_matches_eager(name: str) -> None:
    fixture = _fixture(name)
    inputs = fixture.inputs()
    (out,) = xnnfold.run_pte(_lowered(name).buffer, inputs)
    with torch.no_grad():
        expected = fixture.model()(*inputs)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def _outside_conv_names(lowered: Lowered) -> set[str]:
    graph = lowered.edge.exported_program().graph
    return {
        node.name
        for node in graph.nodes
        if node.op == "call_function" and "convolution" in str(node.target)
    }


def test_modulated_conv_is_declined_as_input_dependent() -> None:
    """StyleGAN's modulated conv multiplies its weight by a style computed from z: no
    partitioner can delegate it, and xnnfold must decline it for that reason (not fold it,
    not blame the equalized-LR scale)."""
    result = _lowered_or_error("stylegan_mapping_synthesis")
    assert not isinstance(result, Exception), result
    lowered, partitioner = result
    assert lowered.summary.outside_ops["convolution"] == 1, lowered.summary
    declined = [
        r for r in partitioner.rejections.values() if r.gemm.name in _outside_conv_names(lowered)
    ]
    assert len(declined) == 1, partitioner.rejections
    (rejection,) = declined
    assert rejection.role == "weight"
    assert not rejection.computed_from_constants
    assert "computed at run time" in rejection.reason and "'z'" in rejection.reason
    stack = rejection.gemm.meta.get("nn_module_stack", {})
    assert any(path == "conv0" for path, _ in stack.values()), stack


# Stock lowering a vocoder takes up to a minute: the full tier checks the first fixture
# exercises the problem, the campaign tier every one.
STOCK_CHECKED_IN_FULL_TIER = NAMES[:1]


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=campaign_unless(n in STOCK_CHECKED_IN_FULL_TIER)) for n in NAMES],
)
def test_stock_leaves_computed_weight_gemms_on_portable(name: str) -> None:
    """The fixture exercises the problem: stock declines exactly the computed weights (and
    the input-dependent ones), and delegates every other GEMM."""
    lowered = _lowered_stock(name)
    expected = _computed_weight_gemms(name) + _fixture(name).runtime_weight_gemms
    assert _computed_weight_gemms(name) > 0
    assert _outside_gemms(lowered) == expected, lowered.summary


# A byte-identity sweep over every fixture is the campaign tier's; the full tier keeps
# the first two (a wav2vec2 encoder and a HiFi-GAN generator).
BITWISE_IN_FULL_TIER = NAMES[:2]


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=campaign_unless(n in BITWISE_IN_FULL_TIER)) for n in NAMES],
)
def test_bitwise_equal_to_hand_folded(name: str) -> None:
    inputs = _fixture(name).inputs()
    (ours,) = xnnfold.run_pte(_lowered(name).buffer, inputs)
    (theirs,) = xnnfold.run_pte(lowered_hand_folded(name).buffer, inputs)
    assert torch.equal(ours, theirs), (ours - theirs).abs().max()


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_pte_no_larger_than_hand_folded(name: str) -> None:
    assert len(_lowered(name).buffer) <= len(lowered_hand_folded(name).buffer)
