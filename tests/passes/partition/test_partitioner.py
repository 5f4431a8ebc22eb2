"""XnnpackFoldingPartitioner: stock behaviour where nothing is computed, folding where it is."""

from __future__ import annotations

import logging
import operator
import subprocess
import sys

import pytest
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.backends.xnnpack.xnnpack_preprocess import XnnpackBackend
from executorch.exir import to_edge_transform_and_lower
from executorch.exir.delegate import executorch_call_delegate
from torch import nn
from torch.nn.utils.parametrizations import weight_norm

import xnnfold
from xnnfold._meta import FOLD_META_KEY
from xnnfold.passes import XnnpackFoldingPartitioner

from tests._lowering import fixture_by_name, lower_folding, lower_stock, lowered_folding

pytestmark = pytest.mark.runtime


class PlainMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(16, 32), nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x)))


class PlainConvs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c = nn.Conv1d(4, 8, 3, padding=1)
        self.t = nn.ConvTranspose1d(8, 4, 4, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.t(torch.tanh(self.c(x)))


class ActivationMatmuls(nn.Module):
    """Attention-like: every GEMM multiplies activations, nothing to fold."""

    def __init__(self) -> None:
        super().__init__()
        self.q, self.k = nn.Linear(16, 16), nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k = self.q(x), self.k(x)
        return torch.softmax(q @ k.transpose(-1, -2), -1) @ x


PLAIN = {
    "mlp": (PlainMLP, (torch.randn(3, 16),)),
    "convs": (PlainConvs, (torch.randn(1, 4, 20),)),
    "activation_matmuls": (ActivationMatmuls, (torch.randn(2, 5, 16),)),
}


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=() if n == "convs" else pytest.mark.slow) for n in PLAIN]
)
def test_no_computed_weights_gives_a_byte_identical_pte(name: str) -> None:
    build, inputs = PLAIN[name]
    torch.manual_seed(0)
    stock = lower_stock(build().eval(), inputs)
    torch.manual_seed(0)
    ours = lower_folding(build().eval(), inputs)
    assert ours.buffer == stock.buffer


def test_importing_xnnfold_installs_nothing() -> None:
    code = (
        "from executorch.backends.xnnpack.xnnpack_preprocess import XnnpackBackend as B\n"
        "before = B.__dict__['preprocess']\n"
        "import xnnfold, xnnfold.passes, xnnfold.rewriter, xnnfold.fixtures\n"
        "assert B.__dict__['preprocess'] is before\n"
        "assert not xnnfold.is_preprocess_hook_installed()\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_unprepared_model_is_still_folded() -> None:
    fixture = fixture_by_name("weight_norm_dim2-conv1d")
    ep = torch.export.export(fixture.model(), fixture.inputs())
    edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackFoldingPartitioner()])
    assert xnnfold.summarize(edge).fully_delegated
    (out,) = xnnfold.run_pte(edge.to_executorch().buffer, fixture.inputs())
    (ref,) = xnnfold.run_pte(lowered_folding("weight_norm_dim2-conv1d").buffer, fixture.inputs())
    assert torch.equal(out, ref)


def test_fold_false_partitions_like_stock() -> None:
    fixture = fixture_by_name("weight_norm_dim0-conv1d")
    stock = lower_stock(fixture.model(), fixture.inputs())
    ep = torch.export.export(fixture.model(), fixture.inputs())
    edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackFoldingPartitioner(fold=False)])
    assert edge.to_executorch().buffer == stock.buffer


class WithUnsupportedOp(nn.Module):
    """A folded conv followed by an op XNNPACK does not take (cumsum stays top-level)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = weight_norm(nn.Conv1d(4, 4, 3, padding=1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(self.conv(x), -1)


def test_top_level_program_is_not_rewritten() -> None:
    torch.manual_seed(0)
    model, x = WithUnsupportedOp().eval(), torch.randn(1, 4, 9)
    edge = xnnfold.lower(model, (x,))
    gm = edge.exported_program().graph_module
    # The folded constant lives only in the delegate: no new top-level placeholder, and the
    # lowered module keeps its original (unfolded) program for everyone else to see.
    assert not any(n.name.startswith("xnnfold_") for n in gm.graph.nodes)
    (call,) = [n for n in gm.graph.nodes if n.target is executorch_call_delegate]
    original = getattr(gm, call.args[0].target).original_module
    assert any("_weight_norm" in str(n.target) for n in original.graph.nodes)
    (cumsum,) = [n for n in gm.graph.nodes if "cumsum" in str(n.target)]
    # It reads the delegate's output, and nothing else.
    (read,) = cumsum.all_input_nodes
    assert read.target is operator.getitem and read.args == (call, 0)
    assert cumsum.args[1:] == (-1,)
    (out,) = xnnfold.run_pte(edge.to_executorch().buffer, [x])
    torch.testing.assert_close(out, model(x), atol=1e-5, rtol=1e-5)


class SharedSource(nn.Module):
    """The weight_norm direction is also read outside the weight computation."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = weight_norm(nn.Conv1d(4, 4, 3, padding=1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        v = self.conv.parametrizations.weight.original1
        return self.conv(x) + v.sum()


def test_shared_source_is_declined_with_a_warning_and_still_correct(
    caplog: pytest.LogCaptureFixture,
) -> None:
    torch.manual_seed(0)
    model, x = SharedSource().eval(), torch.randn(1, 4, 9)
    with caplog.at_level(logging.WARNING, logger="xnnfold"):
        edge = xnnfold.lower(model, (x,))
    messages = [r.getMessage() for r in caplog.records if r.name.startswith("xnnfold")]
    assert any("conv.weight" in m and "also used by" in m for m in messages), messages
    assert xnnfold.summarize(edge).outside_ops["convolution"] == 1
    assert not any(FOLD_META_KEY in n.meta for n in edge.exported_program().graph.nodes)
    (out,) = xnnfold.run_pte(edge.to_executorch().buffer, [x])
    torch.testing.assert_close(out, model(x), atol=1e-5, rtol=1e-5)


def test_activation_gemms_log_no_warning(caplog: pytest.LogCaptureFixture) -> None:
    build, inputs = PLAIN["activation_matmuls"]
    with caplog.at_level(logging.WARNING, logger="xnnfold"):
        xnnfold.lower(build().eval(), inputs)
    assert not [r for r in caplog.records if r.name.startswith("xnnfold")]


def test_accepts_the_stock_constructor_options() -> None:
    partitioner = XnnpackFoldingPartitioner(
        None, None, False, False, force_non_static_weights_for_f32_linear=False, enable_bf16=False
    )
    stock_targets = set(XnnpackPartitioner().target_partitioner_configs)
    assert set(partitioner.target_partitioner_configs) == stock_targets


def test_rejects_a_bad_max_fold_nodes() -> None:
    with pytest.raises(ValueError, match="max_fold_nodes"):
        XnnpackFoldingPartitioner(max_fold_nodes=0)


def test_hook_is_installed_only_when_something_is_folded() -> None:
    xnnfold.uninstall_preprocess_hook()
    build, inputs = PLAIN["mlp"]
    xnnfold.lower(build().eval(), inputs)
    assert not xnnfold.is_preprocess_hook_installed()
    fixture = fixture_by_name("weight_norm_dim0-linear")
    xnnfold.lower(fixture.model(), fixture.inputs())
    assert xnnfold.is_preprocess_hook_installed()
    assert isinstance(XnnpackBackend.__dict__["preprocess"], staticmethod)


@pytest.mark.parametrize("orthogonal_map", ["matrix_exp", "cayley"])
def test_orthogonal_parametrization_is_folded(orthogonal_map: str) -> None:
    from torch.nn.utils.parametrizations import orthogonal

    torch.manual_seed(0)
    model = orthogonal(nn.Linear(8, 12), orthogonal_map=orthogonal_map).eval()
    x = torch.randn(3, 8)
    edge = xnnfold.lower(model, (x,))
    assert xnnfold.summarize(edge).fully_delegated
    (out,) = xnnfold.run_pte(edge.to_executorch().buffer, [x])
    torch.testing.assert_close(out, model(x), atol=1e-5, rtol=1e-5)
