"""Every claim about a lowered program, checked by running the .pte against eager.

The grid is norms x layer kinds (plus a computed bias and ``x @ W.t()``). Each case is
lowered once with xnnfold and once hand-folded (parametrizations removed, stock
partitioner); the tests then compare the two programs.
"""

from __future__ import annotations

import pytest
import torch

import xnnfold
from xnnfold.fixtures import LAYERS, NORMS, PretransposedMatmul

from tests._lowering import (
    fixture_by_name,
    lower_stock,
    lowered_dynamic,
    lowered_folding,
    lowered_hand_folded,
)
from tests._tiers import campaign_unless

pytestmark = pytest.mark.runtime

GRID = [
    f"{norm}-{layer}"
    for norm in NORMS
    for layer in LAYERS
    if not (norm == "weight_norm_dim2" and layer == "linear")
]
EXTRA = ["linear_computed_bias", "matmul_transposed"]
CASES = GRID + EXTRA
# The fast tier's slice of the grid: every norm and every layer kind at least once, and
# both extras.
FAST_CASES = frozenset(
    {
        "weight_norm_dim0-conv1d",
        "weight_norm_dim2-conv2d",
        "weight_norm_dimNone-depthwise_conv2d",
        "spectral_norm-linear",
        "legacy_weight_norm-conv_transpose1d",
        "legacy_spectral_norm-conv1d_grouped",
        "weight_norm_dim0-conv_transpose2d",
        *EXTRA,
    }
)


# The full tier's slice: every layer kind under the two parametrizations most models use,
# every norm on a plain and a transposed convolution, and the fast slice; the campaign
# tier runs the whole grid.
FULL_CASES = FAST_CASES | frozenset(
    [f"{norm}-{layer}" for norm in ("weight_norm_dim0", "spectral_norm") for layer in LAYERS]
    + [f"{norm}-{layer}" for norm in NORMS for layer in ("conv1d", "conv_transpose1d")]
)


def _tiered(names: list[str]) -> list[object]:
    def marks(name: str) -> list[pytest.MarkDecorator]:
        if name in FAST_CASES:
            return []
        return [pytest.mark.slow, *campaign_unless(name in FULL_CASES)]

    return [pytest.param(n, marks=marks(n)) for n in names]


def _eager(name: str, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
    with torch.no_grad():
        return fixture_by_name(name).model()(*inputs)


@pytest.mark.parametrize("name", _tiered(CASES))
def test_fully_delegated(name: str) -> None:
    summary = lowered_folding(name).summary
    assert summary.delegates == 1, summary
    assert not summary.outside_ops, summary.outside_ops_text()


@pytest.mark.parametrize("name", _tiered(CASES))
def test_matches_eager(name: str) -> None:
    inputs = fixture_by_name(name).inputs()
    (out,) = xnnfold.run_pte(lowered_folding(name).buffer, inputs)
    torch.testing.assert_close(out, _eager(name, inputs), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", _tiered(GRID + ["linear_computed_bias"]))
def test_bitwise_equal_to_hand_folded(name: str) -> None:
    inputs = fixture_by_name(name).inputs()
    (ours,) = xnnfold.run_pte(lowered_folding(name).buffer, inputs)
    (theirs,) = xnnfold.run_pte(lowered_hand_folded(name).buffer, inputs)
    assert torch.equal(ours, theirs), (ours - theirs).abs().max()


@pytest.mark.parametrize("name", _tiered(GRID + ["linear_computed_bias"]))
def test_pte_no_larger_than_hand_folded(name: str) -> None:
    assert len(lowered_folding(name).buffer) <= len(lowered_hand_folded(name).buffer)


def test_matmul_transposed_pte_no_larger_than_fully_folded_twin() -> None:
    """``x @ W.t()`` hand-folded still transposes at run time, and stock leaves that mm on
    portable (a portable op entry is smaller than an XNNPACK node). The like-for-like
    reference is the delegated twin that stores ``W.t()`` itself."""
    fixture = fixture_by_name("matmul_transposed")
    twin = lower_stock(PretransposedMatmul(fixture.model()).eval(), fixture.inputs())
    assert twin.summary.fully_delegated, twin.summary
    assert len(lowered_folding("matmul_transposed").buffer) <= len(twin.buffer)


def _source_tensors(name: str) -> dict[str, torch.Tensor]:
    model = fixture_by_name(name).model()
    sources = {}
    for key, tensor in model.state_dict().items():
        leaf = key.rsplit(".", 1)[-1]
        if "parametrizations" in key or leaf in ("weight_g", "weight_v", "weight_orig"):
            sources[key] = tensor
    assert sources, f"{name} has no source parameters to look for"
    return sources


@pytest.mark.parametrize("name", _tiered(CASES))
def test_source_parameters_not_stored(name: str) -> None:
    buffer = lowered_folding(name).buffer
    for key, tensor in _source_tensors(name).items():
        if key.endswith(("_u", "_v")) and "weight_v" not in key:
            continue  # spectral_norm's power-iteration vectors are tiny and unused after folding
        data = tensor.detach().contiguous().numpy().tobytes()
        assert data not in buffer, f"{key} ({len(data)} bytes) is stored in the .pte"


DYNAMIC = [
    f"{norm}-{layer}"
    for norm in ("weight_norm_dim0", "spectral_norm", "legacy_weight_norm")
    for layer in ("conv1d", "conv_transpose1d", "linear")
]


@pytest.mark.parametrize("name", _tiered(DYNAMIC))
def test_dynamic_length_runs_at_several_lengths(name: str) -> None:
    fixture = fixture_by_name(name)
    lowered = lowered_dynamic(name)
    assert lowered.summary.fully_delegated, lowered.summary
    program = xnnfold.LoadedProgram(lowered.buffer)
    (example,) = fixture.inputs()
    axis = next(iter(fixture.dynamic_shapes()[0]))
    for length in fixture.lengths:
        shape = list(example.shape)
        shape[axis] = length
        x = torch.randn(shape)
        (out,) = program([x])
        torch.testing.assert_close(out, _eager(name, (x,)), atol=1e-5, rtol=1e-5)
