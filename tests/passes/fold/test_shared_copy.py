"""The preprocess copy of a delegate xnnfold partitioned shares its constants' storage,
which preprocess never writes; any other partitioner's delegate gets executorch's copy."""

from __future__ import annotations

from typing import Any, Iterator, Optional

import pytest
import torch
from executorch.backends.xnnpack.xnnpack_preprocess import XnnpackBackend
from executorch.exir import to_edge
from executorch.exir.backend.backend_details import BackendDetails
from torch import nn

import xnnfold
from xnnfold._meta import DELEGATION_TAG_META_KEY
from xnnfold.passes.fold._shared_copy import copy_sharing_constants, partitioned_by_xnnfold

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


def _tagged(tag: str) -> torch.export.ExportedProgram:
    """`_exported` with every node tagged ``tag``, as a partitioner leaves a delegate."""
    ep = _exported()
    for node in ep.graph.nodes:
        if node.op != "output":
            node.meta[DELEGATION_TAG_META_KEY] = tag
    return ep


def _copy_shares_storage(copied: Any, ep: Any) -> list[bool]:
    return [
        copied.state_dict.get(name, copied.constants.get(name)).untyped_storage().data_ptr()
        == tensor.untyped_storage().data_ptr()
        for name, tensor in _constants(ep).items()
    ]


def test_a_tag_of_xnnfolds_partitioner_names_its_delegate() -> None:
    assert partitioned_by_xnnfold(_tagged("xnnfold0"))
    assert not partitioned_by_xnnfold(_tagged("tag0"))
    assert not partitioned_by_xnnfold(_exported())


@needs_seam
def test_an_untagged_unmarked_program_gets_the_inherited_deep_copy(hook: None) -> None:
    ep = _exported()
    shares = _copy_shares_storage(XnnpackBackend.copy_exported_program_for_preprocess(ep, []), ep)
    assert shares and not any(shares)


@needs_seam
def test_another_partitioners_delegate_gets_the_inherited_deep_copy(hook: None) -> None:
    ep = _tagged("tag0")
    shares = _copy_shares_storage(XnnpackBackend.copy_exported_program_for_preprocess(ep, []), ep)
    assert shares and not any(shares)


@needs_seam
def test_a_delegate_xnnfold_partitioned_shares_with_nothing_to_fold(hook: None) -> None:
    ep = _tagged("xnnfold0")
    shares = _copy_shares_storage(XnnpackBackend.copy_exported_program_for_preprocess(ep, []), ep)
    assert shares and all(shares)


def _shares(copied: Any, program: Any) -> Optional[bool]:
    """Whether every constant of ``copied`` is over one of ``program``'s storages; None
    where ``program`` has no constant."""
    pointers = {t.untyped_storage().data_ptr() for t in _constants(program).values()}
    if not pointers:
        return None
    return all(t.untyped_storage().data_ptr() in pointers for t in _constants(copied).values())


def _lowered_by_xnnfold(edge: Any, monkeypatch: pytest.MonkeyPatch) -> list[Optional[bool]]:
    """Lower ``edge`` with xnnfold's partitioner; for each delegate's preprocess copy,
    whether it shares its program's constants (`_shares`)."""
    shared: list[Optional[bool]] = []
    real = XnnpackBackend.copy_exported_program_for_preprocess

    def spy(program: Any, compile_specs: Any) -> Any:
        copied = real(program, compile_specs)
        shared.append(_shares(copied, program))
        return copied

    monkeypatch.setattr(XnnpackBackend, _COPY, spy)
    edge.to_backend(xnnfold.XnnpackFoldingPartitioner(facts=xnnfold.CrossMethodFacts()))
    return shared


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
    shared = _lowered_by_xnnfold(edge, monkeypatch)
    with_constants = [value for value in shared if value is not None]
    assert with_constants and all(with_constants), f"a copy held constants twice: {shared}"
    for key, tensor in held.items():
        assert torch.equal(tensor, before[key]), f"preprocess wrote into constant {key}"


@needs_seam
def test_a_delegate_with_nothing_to_fold_shares_and_keeps_every_bit(
    hook: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A conv1d (reshaped to 4-D in preprocess), a linear and a buffer, none computed:
    # xnnfold's delegate of it is unmarked, and its copy still shares.
    edge = to_edge(_exported())
    held = _constants(edge.exported_program())
    before = {k: v.clone() for k, v in held.items()}
    shared = _lowered_by_xnnfold(edge, monkeypatch)
    assert shared == [True]
    for key, tensor in held.items():
        assert torch.equal(tensor, before[key]), f"preprocess wrote into constant {key}"
