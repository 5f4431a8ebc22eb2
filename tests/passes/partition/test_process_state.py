"""State the folding partitioner keeps beyond the graphs it partitions lives no longer than
it must (docs/architecture.md, "Process state")."""

from __future__ import annotations

import logging

import pytest
import torch
from executorch.backends.xnnpack.partition.config.gemm_configs import ConvolutionConfig
from executorch.exir import to_edge_transform_and_lower
from torch import nn
from torch.nn.utils.parametrizations import weight_norm

from xnnfold import prepare_for_xnnpack
from xnnfold.passes import XnnpackFoldingPartitioner
from xnnfold.passes.partition._configs import FoldingConvolutionConfig
from xnnfold.passes.partition._outcome import PARTITIONER_LOGGER

STORED_TWICE = "is folded although its sources are also kept for another reader"


class _Shared(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = weight_norm(nn.Linear(8, 8))


class _Folds(nn.Module):
    def __init__(self, shared: _Shared) -> None:
        super().__init__()
        self.shared = shared

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.shared.lin(x)


class _StoresTheDirection(nn.Module):
    """Reads weight_norm's direction outside any GEMM: the program stores it anyway."""

    def __init__(self, shared: _Shared) -> None:
        super().__init__()
        self.shared = shared

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.shared.lin.parametrizations.weight.original1.sum()


@pytest.mark.slow
def test_the_stored_twice_warning_is_said_once_per_lowering(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Method "a" kept weight_norm's ops before method "b" showed that it stores the
    direction, so "a" folds anyway and warns: once per lowering although the predicate
    runs many times, and again when the same partitioners lower the next program."""
    shared = prepare_for_xnnpack(_Shared().eval())
    x = torch.randn(2, 8)
    partitioners = {"a": [XnnpackFoldingPartitioner()], "b": [XnnpackFoldingPartitioner()]}
    counts = []
    for _ in range(2):
        programs = {
            "a": torch.export.export(_Folds(shared), (x,)),
            "b": torch.export.export(_StoresTheDirection(shared), (x,)),
        }
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger=PARTITIONER_LOGGER):
            to_edge_transform_and_lower(programs, partitioner=partitioners)
        counts.append(sum(STORED_TWICE in record.getMessage() for record in caplog.records))
    assert counts == [1, 1]


def test_the_convolution_bias_override_restores_the_option_when_upstream_raises(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A convolution reads its bias as static by turning the linear-only option off for
    the one upstream call; the option is back whatever that call does."""

    def fails(*args: object) -> tuple[bool, list[object]]:
        raise RuntimeError("upstream failed")

    monkeypatch.setattr(ConvolutionConfig, "_get_bias_deps", fails)
    config = FoldingConvolutionConfig(force_non_static_weights_for_f32_linear=True)
    with pytest.raises(RuntimeError, match="upstream failed"):
        config._get_bias_deps(None, None, None)  # type: ignore[arg-type]
    assert config.force_non_static_weights_for_f32_linear is True
