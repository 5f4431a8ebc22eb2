"""Run a `.pte` in-process through `executorch.runtime` and time it."""

from __future__ import annotations

import os
from typing import Any, Optional, Sequence, Union

import torch
from executorch.runtime import Runtime

__all__ = ["LoadedProgram", "run_pte"]

DataPath = Union[str, "os.PathLike[str]"]


class LoadedProgram:
    """A loaded `.pte` method.

    Holds the runtime `Program` for as long as the `Method`: a method borrows from its
    program, and a program freed first makes ``execute`` crash at random. ``data_path``
    is the external data file (``.ptd``) the program needs, if any (`xnnfold.save`
    writes it beside the ``.pte``).
    """

    def __init__(
        self, buffer: bytes, method: str = "forward", *, data_path: Optional[DataPath] = None
    ) -> None:
        self._buffer = buffer
        if data_path is None:
            self._program = Runtime.get().load_program(buffer)
        else:
            self._program = Runtime.get().load_program(buffer, data_path=os.fspath(data_path))
        self._method = self._program.load_method(method)

    def __call__(self, inputs: Sequence[torch.Tensor]) -> list[Any]:
        return list(self._method.execute(list(inputs)))


def run_pte(
    buffer: bytes,
    inputs: Sequence[torch.Tensor],
    method: str = "forward",
    *,
    data_path: Optional[DataPath] = None,
) -> list[Any]:
    """Execute ``method`` of a `.pte` once (with its ``.ptd``, if it needs one) and
    return its outputs."""
    return LoadedProgram(buffer, method, data_path=data_path)(inputs)
