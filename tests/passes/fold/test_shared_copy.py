"""A marked delegate's preprocess copy shares its constants' storage, which preprocess never
writes."""

from __future__ import annotations

from typing import Any, Iterator

import pytest
import torch
from executorch.backends.xnnpack.xnnpack_preprocess import XnnpackBackend
from executorch.exir import to_edge
from executorch.exir.backend.backend_details import BackendDetails
from torch import nn

import xnnfold
from xnnfold.passes.fold._shared_copy import copy_sharing_constants

from tests._lowering import fixture_by_name

_COPY = "copy_exported_program_for_preprocess"
needs_seam = pytest.mark.skipif(
    not hasattr(BackendDetails, _COPY),
    reason="this executorch deep-copies a delegate's program inline: no seam to share by",
)


class _ConvLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.linear = nn.Conv1d(4, 8, 3), nn.Linear(6, 5)
        self.register_buffer("offset", torch.ones(5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(torch.relu(self.conv(x))) + self.offset


def _exported() -> torch.export.ExportedProgram:
    torch.manual_seed(0)
    return torch.export.export(_ConvLinear().eval(), (torch.randn(1, 4, 8),))


def _constants(ep: torch.export.ExportedProgram) -> dict[str, Any]:
    return {**ep.state_dict, **ep.constants}


def test_the_copy_shares_every_constants_storage() -> None:
    ep = _exported()
    copied = copy_sharing_constants(ep)
    original, shared = _constants(ep), _constants(copied)
    assert shared.keys() == original.keys() and original
    for name, tensor in original.items():
        assert shared[name] is not tensor, name
        assert shared[name].untyped_storage().data_ptr() == tensor.untyped_storage().data_ptr()
        assert type(shared[name]) is type(tensor), name


def test_the_copy_has_a_graph_of_its_own() -> None:
    ep = _exported()
    copied = copy_sharing_constants(ep)
    assert copied.graph_module is not ep.graph_module
    (node,) = [n for n in copied.graph.nodes if n.op == "output"]
    copied.graph.erase_node(node)
    assert any(n.op == "output" for n in ep.graph.nodes)


def test_rebinding_a_copied_constant_leaves_the_original() -> None:
    ep = _exported()
    copied = copy_sharing_constants(ep)
    name = next(iter(ep.state_dict))
    before = ep.state_dict[name].clone()
    copied.state_dict[name].data = torch.zeros_like(before)
    torch.testing.assert_close(ep.state_dict[name], before, rtol=0, atol=0)


@pytest.fixture
def hook() -> Iterator[None]:
    xnnfold.uninstall_preprocess_hook()
    xnnfold.install_preprocess_hook()
    yield
    xnnfold.uninstall_preprocess_hook()


@needs_seam
def test_an_unmarked_program_gets_the_inherited_deep_copy(hook: None) -> None:
    ep = _exported()
    copied = XnnpackBackend.copy_exported_program_for_preprocess(ep, [])
    for name, tensor in _constants(ep).items():
        assert (
            copied.state_dict.get(name, copied.constants.get(name)).untyped_storage().data_ptr()
            != tensor.untyped_storage().data_ptr()
        ), name


def _shares(copied: Any, program: Any) -> bool:
    pointers = {t.untyped_storage().data_ptr() for t in _constants(program).values()}
    return bool(pointers) and all(
        t.untyped_storage().data_ptr() in pointers for t in _constants(copied).values()
    )


# Families whose preprocess touches constants: conv1d kernels reshaped to 4-D
# (Conv1dUnsqueezePass), batch norm fused into a convolution, transposed and nested
# computations, a bias computed with its weight, fp16 and bf16 weights.
_FIXTURES = (
    "weight_norm_dim0-conv1d",
    "ws_conv_batch_norm",
    "matmul_transposed",
    "nested_weight_norm",
    "linear_computed_bias",
    "cast_fp16_conv",
    "cast_bf16_conv",
    "wavlm_attention",
)


@needs_seam
@pytest.mark.runtime
@pytest.mark.parametrize("name", _FIXTURES)
def test_lowering_keeps_every_bit_of_the_programs_constants(
    name: str, hook: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    fixture = fixture_by_name(name)
    edge = to_edge(torch.export.export(fixture.model(), fixture.inputs()))
    before = {k: v.clone() for k, v in _constants(edge.exported_program()).items()}
    held = _constants(edge.exported_program())
    shared: list[bool] = []
    real = XnnpackBackend.copy_exported_program_for_preprocess

    def spy(program: Any, compile_specs: Any) -> Any:
        copied = real(program, compile_specs)
        shared.append(_shares(copied, program))
        return copied

    monkeypatch.setattr(XnnpackBackend, _COPY, spy)
    edge.to_backend(xnnfold.XnnpackFoldingPartitioner(facts=xnnfold.CrossMethodFacts()))
    assert any(shared), "no delegate's copy shared its constants"
    for key, tensor in held.items():
        assert torch.equal(tensor, before[key]), f"preprocess wrote into constant {key}"
