"""The preprocess hook: idempotent, reversible, and without effect on unmarked programs."""

from __future__ import annotations

import pytest
from executorch.backends.xnnpack.xnnpack_preprocess import XnnpackBackend

import xnnfold
from tests._lowering import fixture_by_name, lower_stock


@pytest.fixture
def stock_preprocess():
    xnnfold.uninstall_preprocess_hook()
    original = XnnpackBackend.__dict__["preprocess"]
    yield original
    xnnfold.uninstall_preprocess_hook()
    assert XnnpackBackend.__dict__["preprocess"] is original


def test_install_is_idempotent(stock_preprocess) -> None:
    xnnfold.install_preprocess_hook()
    wrapper = XnnpackBackend.__dict__["preprocess"]
    xnnfold.install_preprocess_hook()
    assert XnnpackBackend.__dict__["preprocess"] is wrapper is not stock_preprocess


def test_uninstall_restores_the_original_object(stock_preprocess) -> None:
    xnnfold.install_preprocess_hook()
    xnnfold.install_preprocess_hook()
    xnnfold.uninstall_preprocess_hook()
    assert XnnpackBackend.__dict__["preprocess"] is stock_preprocess
    xnnfold.uninstall_preprocess_hook()
    assert XnnpackBackend.__dict__["preprocess"] is stock_preprocess


@pytest.mark.runtime
@pytest.mark.parametrize("name", ["weight_norm_dim0-conv1d", "spectral_norm-linear"])
def test_installed_hook_changes_nothing_for_stock_lowering(stock_preprocess, name: str) -> None:
    fixture = fixture_by_name(name)
    without = lower_stock(fixture.model(), fixture.inputs()).buffer
    xnnfold.install_preprocess_hook()
    with_hook = lower_stock(fixture.model(), fixture.inputs()).buffer
    assert with_hook == without


def test_wrapper_keeps_the_stock_signature(stock_preprocess) -> None:
    xnnfold.install_preprocess_hook()
    assert XnnpackBackend.preprocess.__wrapped__ is stock_preprocess.__func__
