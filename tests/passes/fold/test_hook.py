"""The preprocess hook: idempotent, reversible, beside other wrappers, inert on programs
xnnfold did not partition."""

from __future__ import annotations

import copy
import functools
from typing import Any, Callable, Iterator

import pytest
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.backends.xnnpack.xnnpack_preprocess import XnnpackBackend
from executorch.exir import to_edge_transform_and_lower
from executorch.exir.backend.backend_details import BackendDetails
from executorch.exir.lowered_backend_module import get_lowered_submodules
from torch import nn

import xnnfold
from xnnfold.passes.fold import _hook

from tests._lowering import lower_stock, lowered_folding

_COPY = "copy_exported_program_for_preprocess"
_ABSENT = object()


@pytest.fixture
def stock_preprocess() -> Iterator[object]:
    xnnfold.uninstall_preprocess_hook()
    original = XnnpackBackend.__dict__["preprocess"]
    original_copy = XnnpackBackend.__dict__.get(_COPY, _ABSENT)
    yield original
    left = XnnpackBackend.__dict__["preprocess"]
    left_copy = XnnpackBackend.__dict__.get(_COPY, _ABSENT)
    # Never leak a wrapper into other tests.
    XnnpackBackend.preprocess = original
    if original_copy is _ABSENT:
        if left_copy is not _ABSENT:
            delattr(XnnpackBackend, _COPY)
    else:
        setattr(XnnpackBackend, _COPY, original_copy)
    assert left is original, "the test left XnnpackBackend.preprocess wrapped"
    assert left_copy is original_copy, f"the test left XnnpackBackend.{_COPY} replaced"


def _wrap_current() -> tuple[staticmethod, list[int]]:
    """Another library's wrapper of `XnnpackBackend.preprocess`, with a call counter."""
    inner = XnnpackBackend.preprocess
    calls: list[int] = []

    @functools.wraps(inner)
    def theirs(*args: Any) -> Any:
        calls.append(1)
        return inner(*args)

    wrapper = staticmethod(theirs)
    XnnpackBackend.preprocess = wrapper
    return wrapper, calls


def test_install_is_idempotent(stock_preprocess: object) -> None:
    xnnfold.install_preprocess_hook()
    wrapper = XnnpackBackend.__dict__["preprocess"]
    xnnfold.install_preprocess_hook()
    assert XnnpackBackend.__dict__["preprocess"] is wrapper is not stock_preprocess
    xnnfold.uninstall_preprocess_hook()


def test_uninstall_restores_the_original_object(stock_preprocess: object) -> None:
    xnnfold.install_preprocess_hook()
    xnnfold.install_preprocess_hook()
    xnnfold.uninstall_preprocess_hook()
    assert XnnpackBackend.__dict__["preprocess"] is stock_preprocess
    assert not xnnfold.is_preprocess_hook_installed()
    xnnfold.uninstall_preprocess_hook()
    assert XnnpackBackend.__dict__["preprocess"] is stock_preprocess


@pytest.mark.skipif(
    not hasattr(BackendDetails, _COPY), reason="this executorch copies a delegate's program inline"
)
def test_install_replaces_the_copy_and_uninstall_puts_it_back(stock_preprocess: object) -> None:
    before = XnnpackBackend.__dict__.get(_COPY, _ABSENT)
    xnnfold.install_preprocess_hook()
    assert XnnpackBackend.__dict__.get(_COPY, _ABSENT) is not before
    xnnfold.uninstall_preprocess_hook()
    assert XnnpackBackend.__dict__.get(_COPY, _ABSENT) is before


def test_install_under_another_wrapper_does_not_wrap_twice(stock_preprocess: object) -> None:
    xnnfold.install_preprocess_hook()
    ours = XnnpackBackend.__dict__["preprocess"]
    theirs, _ = _wrap_current()
    assert xnnfold.is_preprocess_hook_installed()
    xnnfold.install_preprocess_hook()
    assert XnnpackBackend.__dict__["preprocess"] is theirs
    XnnpackBackend.preprocess = ours
    xnnfold.uninstall_preprocess_hook()


def test_uninstall_under_another_wrapper_raises(stock_preprocess: object) -> None:
    xnnfold.install_preprocess_hook()
    ours = XnnpackBackend.__dict__["preprocess"]
    theirs, _ = _wrap_current()
    with pytest.raises(RuntimeError, match=r"wrapped again \(defined at .*test_hook.py:\d+\)"):
        xnnfold.uninstall_preprocess_hook()
    assert XnnpackBackend.__dict__["preprocess"] is theirs
    XnnpackBackend.preprocess = ours
    xnnfold.uninstall_preprocess_hook()
    assert XnnpackBackend.__dict__["preprocess"] is stock_preprocess


def test_uninstall_over_another_wrapper_restores_that_wrapper(stock_preprocess: object) -> None:
    theirs, calls = _wrap_current()
    assert not xnnfold.is_preprocess_hook_installed()
    xnnfold.install_preprocess_hook()
    assert XnnpackBackend.__dict__["preprocess"] is not theirs
    # Ours calls theirs: a stock lowering goes through both.
    fixture = _PlainConvLinear().eval(), (torch.randn(1, 4, 8),)
    lower_stock(*fixture)
    assert calls, "the wrapper under the hook was not called"
    xnnfold.uninstall_preprocess_hook()
    assert XnnpackBackend.__dict__["preprocess"] is theirs
    XnnpackBackend.preprocess = stock_preprocess  # take theirs out, as its owner would


class _PlainConvLinear(nn.Module):
    """Static weights: the stock partitioner delegates both GEMMs."""

    def __init__(self) -> None:
        super().__init__()
        self.conv, self.linear = nn.Conv1d(4, 8, 3), nn.Linear(6, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(torch.relu(self.conv(x)))


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the programs the installed wrapper looks at."""
    seen: list[int] = []
    real: Callable[..., bool] = _hook.partitioned_by_xnnfold

    def spy(program: Any) -> bool:
        seen.append(1)
        return real(program)

    monkeypatch.setattr(_hook, "partitioned_by_xnnfold", spy)
    return seen


@pytest.mark.runtime
def test_installed_hook_changes_nothing_for_stock_lowering(
    stock_preprocess: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    def build() -> tuple[nn.Module, tuple[torch.Tensor]]:
        torch.manual_seed(0)
        return _PlainConvLinear().eval(), (torch.randn(1, 4, 8),)

    without = lower_stock(*build())
    assert get_lowered_submodules(without.edge.exported_program().graph_module)
    seen = _counting(monkeypatch)
    xnnfold.install_preprocess_hook()
    try:
        with_hook = lower_stock(*build())
    finally:
        xnnfold.uninstall_preprocess_hook()
    assert seen, "the hook's wrapper never ran: preprocess was not called"
    assert with_hook.buffer == without.buffer


def test_wrapper_keeps_the_stock_signature(stock_preprocess: object) -> None:
    xnnfold.install_preprocess_hook()
    assert XnnpackBackend.preprocess.__wrapped__ is stock_preprocess.__func__  # type: ignore[attr-defined]
    xnnfold.uninstall_preprocess_hook()


def _preprocessed_with_hook(ep: Any) -> Any:
    """``ep`` through `XnnpackBackend.preprocess` with the hook installed for the call."""
    xnnfold.install_preprocess_hook()
    try:
        return XnnpackBackend.preprocess(ep, [])
    finally:
        xnnfold.uninstall_preprocess_hook()


@pytest.mark.runtime
def test_a_folded_copy_lets_go_of_its_constants_once_serialized(
    stock_preprocess: object,
) -> None:
    """executorch keeps each delegate's private copy until the last delegate is
    preprocessed: a folded copy drops its constants as soon as its own bytes exist."""
    edge = lowered_folding("weight_norm_dim0-conv1d").edge
    (lowered,) = get_lowered_submodules(edge.exported_program().graph_module)
    ep = copy.deepcopy(lowered[1].original_module)
    assert ep.state_dict
    result = _preprocessed_with_hook(ep)
    assert result.processed_bytes
    assert not ep.state_dict and not ep.constants


def _plain_delegate(partitioner: Any) -> Any:
    """The program of the one delegate ``partitioner`` makes of `_PlainConvLinear`
    (nothing to fold), as executorch hands it to preprocess."""
    torch.manual_seed(0)
    ep = torch.export.export(_PlainConvLinear().eval(), (torch.randn(1, 4, 8),))
    edge = to_edge_transform_and_lower(ep, partitioner=[partitioner])
    (lowered,) = get_lowered_submodules(edge.exported_program().graph_module)
    return copy.deepcopy(lowered[1].original_module)


def test_a_copy_xnnfold_partitioned_lets_go_of_its_constants_with_nothing_folded(
    stock_preprocess: object,
) -> None:
    ep = _plain_delegate(xnnfold.XnnpackFoldingPartitioner(facts=xnnfold.CrossMethodFacts()))
    assert ep.state_dict and not _hook.has_fold_marks(ep)
    result = _preprocessed_with_hook(ep)
    assert result.processed_bytes
    assert not ep.state_dict and not ep.constants


def test_another_partitioners_copy_keeps_its_constants(stock_preprocess: object) -> None:
    ep = _plain_delegate(XnnpackPartitioner())
    names = set(ep.state_dict)
    assert names
    _preprocessed_with_hook(ep)
    assert set(ep.state_dict) == names


class _FoldThenSine(nn.Module):
    """A linear with a computed weight (xnnfold's delegate) whose output a sine and a
    linear read: a partitioner after xnnfold's, with a sine config, delegates those."""

    def __init__(self) -> None:
        super().__init__()
        self.weight, self.bias = nn.Parameter(torch.randn(8, 8)), nn.Parameter(torch.randn(8))
        self.linear = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = nn.functional.linear(x, self.weight * 2.0)
        return self.linear(torch.sin(y) + self.bias)


def test_a_later_partitioners_delegate_reading_a_folded_output_is_not_xnnfolds(
    stock_preprocess: object,
) -> None:
    # The folded linear's output keeps its fold mark in the top-level graph, and the
    # stock delegate that reads it gets the mark on its input placeholder (executorch
    # 1.5): the hook's two questions (whose delegate, anything marked) must both say no.
    from executorch.backends.xnnpack.partition.config import ALL_PARTITIONER_CONFIGS
    from executorch.backends.xnnpack.partition.config.generic_node_configs import (
        AddConfig,
        SinConfig,
    )

    torch.manual_seed(0)
    ep = torch.export.export(_FoldThenSine().eval(), (torch.randn(2, 8),))
    configs = [c for c in ALL_PARTITIONER_CONFIGS if c not in (SinConfig, AddConfig)]
    ours = xnnfold.XnnpackFoldingPartitioner(configs=configs, facts=xnnfold.CrossMethodFacts())
    try:
        edge = to_edge_transform_and_lower(ep, partitioner=[ours, XnnpackPartitioner()])
        programs = [
            lowered.original_module
            for _, lowered, _ in get_lowered_submodules(edge.exported_program().graph_module)
        ]
        theirs = [p for p in programs if not _hook.partitioned_by_xnnfold(p)]
        assert theirs, "the stock partitioner delegated nothing"
        for program in theirs:
            assert not _hook.has_fold_marks(program)
    finally:
        xnnfold.uninstall_preprocess_hook()
