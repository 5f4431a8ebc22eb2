"""Counting the analysis' sweeps of a graph: how the tests see that a query read a cache."""

from __future__ import annotations

import pytest
from torch.export import ExportedProgram

from xnnfold.passes.analysis import _constants


def count_sweeps(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every constant-map sweep from here on, by the swept graph's node count."""
    found: list[int] = []
    real = _constants._SignatureIndex.of

    def counting(ep: ExportedProgram) -> object:
        found.append(len(ep.graph.nodes))
        return real(ep)

    monkeypatch.setattr(_constants._SignatureIndex, "of", staticmethod(counting))
    return found
