"""Full-size end-to-end cases: the built-in default and the demo command. Marked slow; CI runs them."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import xnnfold
from xnnfold.fixtures import FIXTURES

from tests._lowering import lower_folding, lower_stock

pytestmark = [pytest.mark.slow, pytest.mark.runtime]


@pytest.mark.parametrize("name", ["pos_conv_small", "wn_conv_stack"])
def test_fixture_with_dynamic_length(name: str) -> None:
    fixture = FIXTURES[name]
    lowered = lower_folding(fixture.model(), fixture.inputs(), fixture.dynamic_shapes())
    assert lowered.summary.fully_delegated, lowered.summary
    program = xnnfold.LoadedProgram(lowered.buffer)
    model = fixture.model()
    for length in fixture.lengths:
        x = torch.randn(1, fixture.inputs()[0].shape[1], length)
        (out,) = program([x])
        with torch.no_grad():
            torch.testing.assert_close(out, model(x), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(
    "name", ["pos_conv", "spectral_mlp", "wn_conv_stack", "linear_computed_bias"]
)
def test_fixture_is_folded_bitwise_like_hand_folded(name: str) -> None:
    fixture = FIXTURES[name]
    inputs = fixture.inputs()
    ours = lower_folding(fixture.model(), inputs)
    hand = lower_stock(fixture.hand_folded(), inputs)
    assert ours.summary.fully_delegated, ours.summary
    assert len(ours.buffer) <= len(hand.buffer)
    (a,) = xnnfold.run_pte(ours.buffer, inputs)
    (b,) = xnnfold.run_pte(hand.buffer, inputs)
    assert torch.equal(a, b)


def test_demo_prints_the_three_way_table() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "xnnfold", "demo", "--fixture", "pos_conv_small", "--runs", "2"],
        check=True,
        capture_output=True,
        text=True,
    )
    rows = [line for line in result.stdout.splitlines() if line.startswith("| pos_conv_small")]
    assert [row.split("|")[2].strip() for row in rows] == ["stock", "xnnfold", "hand-folded"]
    xnnfold_row = rows[1].split("|")
    assert xnnfold_row[3].strip() == "1" and xnnfold_row[4].strip() == "none"
    assert "lowering xnnfold" in result.stderr
