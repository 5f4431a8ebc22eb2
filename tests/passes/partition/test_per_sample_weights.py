"""A per-sample weight runs in the delegate where XNNPACK has a run-time-weight form.

A weight computed from a parameter and the inputs (``F.linear(x, self.v * s)``, ``s`` an
input) has nothing to fold (XNF501). XNNPACK's fully-connected op reads such an fp32
matrix as an input, so the folding partitioner delegates the linear, addmm or mm with the
weight computed at run time; the stock partitioner leaves it on portable. A convolution
has no such form and stays on portable. Each case runs the `.pte` through
executorch.runtime against eager.
"""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch
import torch.nn.functional as F
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import EdgeProgramManager, to_edge_transform_and_lower
from torch import nn

import xnnfold

pytestmark = pytest.mark.runtime

IN, OUT = 24, 16


def _linear(v: torch.Tensor, x: torch.Tensor, s: torch.Tensor, b: Any) -> torch.Tensor:
    return F.linear(x, v * s, b)


def _addmm(v: torch.Tensor, x: torch.Tensor, s: torch.Tensor, b: Any) -> torch.Tensor:
    return torch.addmm(b, x, v.t() * s.t())


def _mm(v: torch.Tensor, x: torch.Tensor, s: torch.Tensor, b: Any) -> torch.Tensor:
    out = x @ (v.t() * s.t())
    return out if b is None else out + b


_GEMMS: dict[str, Callable[..., torch.Tensor]] = {"linear": _linear, "addmm": _addmm, "mm": _mm}


class PerSample(nn.Module):
    """A GEMM whose [OUT, IN] weight is a parameter scaled per output channel by ``s``."""

    def __init__(self, gemm: str, *, bias: bool) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(7)
        self.v = nn.Parameter(torch.randn(OUT, IN, generator=generator))
        self.b = nn.Parameter(torch.randn(OUT, generator=generator)) if bias else None
        self.gemm = _GEMMS[gemm]

    def forward(self, x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return self.gemm(self.v, x, s, self.b)


def _inputs(batch: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(8)
    x = torch.randn(*batch, IN, generator=generator)
    return x, torch.rand(OUT, 1, generator=generator) + 0.5


def _lower(model: nn.Module, inputs: tuple[Any, ...], partitioner: Any) -> EdgeProgramManager:
    return to_edge_transform_and_lower(
        torch.export.export(model, inputs), partitioner=[partitioner]
    )


def _gemm_row(edge: EdgeProgramManager) -> Any:
    (row,) = xnnfold.explain(edge).rows
    return row


def _assert_matches_eager(model: nn.Module, edge: EdgeProgramManager, *inputs: Any) -> None:
    program = edge.to_executorch()
    (out,) = xnnfold.run_pte(program.buffer, inputs)
    with torch.no_grad():
        expected = model(*inputs)
    torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-5)


# (GEMM, bias, activation shape before IN): the edge form is the GEMM named, and a
# linear without a bias stays a linear (kept undecomposed, as the stock config keeps one).
_CASES = [
    pytest.param("linear", True, (4,), id="linear-bias-batch4"),
    *(
        pytest.param(
            gemm,
            bias,
            batch,
            id=f"{gemm}-{'bias' if bias else 'nobias'}-batch{'x'.join(map(str, batch))}",
            marks=pytest.mark.slow,
        )
        for gemm, bias, batch in [
            ("linear", True, (1,)),
            ("linear", False, (1,)),
            ("linear", False, (4,)),
            ("linear", True, (2, 3)),
            ("addmm", True, (1,)),
            ("addmm", True, (4,)),
            ("mm", False, (1,)),
            ("mm", False, (4,)),
            ("mm", True, (4,)),
        ]
    ),
]


@pytest.mark.parametrize(("gemm", "bias", "batch"), _CASES)
def test_a_per_sample_weight_runs_in_the_delegate_as_eager(
    gemm: str, bias: bool, batch: tuple[int, ...]
) -> None:
    model, inputs = PerSample(gemm, bias=bias).eval(), _inputs(batch)
    edge = _lower(model, inputs, xnnfold.XnnpackFoldingPartitioner())
    row = _gemm_row(edge)
    assert row.delegated and row.folded == () and row.code == "XNF501", row
    _assert_matches_eager(model, edge, *inputs)


@pytest.mark.slow
@pytest.mark.parametrize("gemm", list(_GEMMS))
def test_the_stock_partitioner_leaves_a_per_sample_weight_on_portable(gemm: str) -> None:
    model, inputs = PerSample(gemm, bias=True).eval(), _inputs((4,))
    edge = _lower(model, inputs, XnnpackPartitioner())
    assert not xnnfold.summarize(edge).fully_delegated
    assert _gemm_row(edge).delegated is False


@pytest.mark.slow
def test_a_per_sample_weight_runs_at_every_batch_of_a_dynamic_batch() -> None:
    model, inputs = PerSample("linear", bias=True).eval(), _inputs((4,))
    batch = torch.export.Dim("batch", min=1, max=32)
    ep = torch.export.export(model, inputs, dynamic_shapes=({0: batch}, None))
    edge = to_edge_transform_and_lower(ep, partitioner=[xnnfold.XnnpackFoldingPartitioner()])
    assert _gemm_row(edge).delegated
    for rows in (1, 4, 32):
        _assert_matches_eager(model, edge, *_inputs((rows,)))


class PerSampleConv(nn.Module):
    """StyleGAN2's modulation without its demodulation: a kernel scaled per input
    channel by ``s``."""

    def __init__(self, dims: int) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(9)
        self.v = nn.Parameter(torch.randn(8, 4, *(3,) * dims, generator=generator))
        self.conv = F.conv1d if dims == 1 else F.conv2d

    def forward(self, x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return self.conv(x, self.v * s)


@pytest.mark.parametrize("dims", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_a_per_sample_convolution_weight_stays_on_portable(dims: int) -> None:
    """XNNPACK has no convolution that reads its kernel at run time."""
    generator = torch.Generator().manual_seed(10)
    x = torch.randn(2, 4, *(9,) * dims, generator=generator)
    s = torch.rand(1, 4, *(1,) * dims, generator=generator) + 0.5
    model = PerSampleConv(dims).eval()
    edge = _lower(model, (x, s), xnnfold.XnnpackFoldingPartitioner())
    row = _gemm_row(edge)
    assert not row.delegated and row.code == "XNF501", row
    _assert_matches_eager(model, edge, x, s)


class ProjectedOperand(nn.Module):
    """``q @ (k(x) * 2).t()``: an operand of the model's activations, not a weight."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(11)
        self.k = nn.Linear(IN, IN)

    def forward(self, q: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return q @ (self.k(x) * 2.0).t()


class GemmOperand(nn.Module):
    """``a @ v(x)``: the operand is another GEMM's output itself, as attention's values."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(13)
        self.v = nn.Linear(IN, IN)

    def forward(self, a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return a @ self.v(x)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("model", "inputs"),
    [
        (ProjectedOperand(), (torch.randn(4, IN), torch.randn(6, IN))),
        (GemmOperand(), (torch.randn(4, IN), torch.randn(IN, IN))),
    ],
    ids=["through-an-op", "a-gemm-output"],
)
def test_an_operand_another_gemm_projects_is_partitioned_as_stock_partitions_it(
    model: nn.Module, inputs: tuple[torch.Tensor, ...]
) -> None:
    model.eval()
    ours = _lower(model, inputs, xnnfold.XnnpackFoldingPartitioner()).to_executorch().buffer
    stock = _lower(model, inputs, XnnpackPartitioner()).to_executorch().buffer
    assert ours == stock


class PermutedPerSample(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.v = nn.Parameter(torch.randn(IN, IN, generator=torch.Generator().manual_seed(12)))

    def forward(self, x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return x @ (self.v * s).permute(0, 1)


@pytest.mark.slow
def test_a_per_sample_weight_permuted_but_not_transposed_stays_on_portable() -> None:
    """XNNPACK's ConvertToLinearPass would read the permute as a transpose (XNF515)."""
    model = PermutedPerSample().eval()
    inputs = (torch.randn(4, IN), torch.rand(IN, 1) + 0.5)
    edge = _lower(model, inputs, xnnfold.XnnpackFoldingPartitioner())
    row = _gemm_row(edge)
    assert not row.delegated and row.code == "XNF515", row
    _assert_matches_eager(model, edge, *inputs)
