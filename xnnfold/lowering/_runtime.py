"""Run a `.pte` in-process through `executorch.runtime` and time it."""

from __future__ import annotations

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


def run_pte(buffer: bytes, inputs: Sequence[torch.Tensor], method: str = "forward") -> list[Any]:
    """Execute ``method`` of a `.pte` once and return its outputs."""
    return LoadedProgram(buffer, method)(inputs)
