"""A toy library for the sweep engine's smoke test (tests/benchmarks/test_sweep_engine.py):
three tiny modules, one of them a weight-normed convolution whose weight is computed.
A worker runs it with ``python -m tests.support.toy_sweep --worker``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

import torch
from torch import nn

from benchmarks.sweeps.engine import Built, Library, main, OutOfReach

GROUP = "tests.support.toy_sweep"
# Where the driver's results go: the test names a folder of its own.
RESULTS_ENV = "XNNFOLD_TOY_SWEEP_RESULTS"
SIDE = "side"


class _Plain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


class _WeightNormed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.utils.parametrizations.weight_norm(nn.Conv2d(3, 8, 3))
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.conv(x)).mean(dim=(2, 3)))


class Toy(Library):
    """Three classes: a plain linear (no computed weight), a weight-normed convolution,
    and one that cannot be built (out of reach)."""

    title = "a toy library"
    build_facts = (SIDE,)
    command = GROUP

    def __init__(self) -> None:
        folder = Path(os.environ.get(RESULTS_ENV, "."))
        self.results = folder / "results.jsonl"
        self.table = folder / "results.md"

    def discover(self) -> list[tuple[str, str]]:
        return [(GROUP, "Plain"), (GROUP, "WeightNormed"), (GROUP, "Unbuildable")]

    def build(self, group: str, name: str, *, facts: Optional[dict[str, Any]] = None) -> Built:
        torch.manual_seed(0)
        if name == "Plain":
            return Built(_Plain().eval(), {"x": torch.randn(2, 4)}, None)
        if name == "WeightNormed":
            # The image's side, recorded on the line: a retime builds the same one.
            side = int((facts or {}).get(SIDE, 8))
            return Built(
                _WeightNormed().eval(), {"x": torch.randn(1, 3, side, side)}, None, {SIDE: side}
            )
        raise OutOfReach("build", "ValueError: a toy that cannot be built")

    def versions(self) -> str:
        return f"toy, torch {torch.__version__.split('+')[0]}"


if __name__ == "__main__":
    raise SystemExit(main(Toy()))
