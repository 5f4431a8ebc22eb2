"""Run a `.pte` in-process through `executorch.runtime` and time it."""

from __future__ import annotations

import statistics
import time
from typing import Any, Sequence

import torch
from executorch.runtime import Runtime

__all__ = ["LoadedProgram", "run_pte"]


class LoadedProgram:
    """A loaded `.pte` method.

    Holds the runtime `Program` for as long as the `Method`: a method borrows from its
    program, and a program freed first makes ``execute`` crash at random.
    """

    def __init__(self, buffer: bytes, method: str = "forward") -> None:
        self._buffer = buffer
        self._program = Runtime.get().load_program(buffer)
        self._method = self._program.load_method(method)

    def __call__(self, inputs: Sequence[torch.Tensor]) -> list[Any]:
        return list(self._method.execute(list(inputs)))

    def median_seconds(
        self, inputs: Sequence[torch.Tensor], *, runs: int, warmup: int = 1
    ) -> float:
        """Median wall time of ``runs`` calls after ``warmup`` untimed ones."""
        for _ in range(warmup):
            self(inputs)
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            self(inputs)
            times.append(time.perf_counter() - start)
        return statistics.median(times)


def run_pte(buffer: bytes, inputs: Sequence[torch.Tensor], method: str = "forward") -> list[Any]:
    """Execute ``method`` of a `.pte` once and return its outputs."""
    return LoadedProgram(buffer, method)(inputs)
