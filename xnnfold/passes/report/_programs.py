"""What the reports read: a lowered program in any of the forms a user holds, by method."""

from __future__ import annotations

from typing import Iterator, Union

from executorch.exir import EdgeProgramManager, ExecutorchProgramManager
from torch.export import ExportedProgram

__all__ = ["Program", "methods"]

Program = Union[EdgeProgramManager, ExecutorchProgramManager, ExportedProgram]


def methods(program: Program) -> Iterator[tuple[str, ExportedProgram]]:
    """Each method's program by name, in name order (a bare program is ``forward``)."""
    if isinstance(program, ExportedProgram):
        yield "forward", program
        return
    for method in sorted(program.methods):
        yield method, program.exported_program(method)
