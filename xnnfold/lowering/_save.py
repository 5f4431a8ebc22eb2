"""Write a lowered program with the external data files it needs, in one call."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Union

from executorch.exir import ExecutorchProgramManager

from xnnfold._upstream import external_data_files_of

__all__ = ["data_files", "save"]

PTD_SUFFIX = ".ptd"


def data_files(program: ExecutorchProgramManager) -> tuple[str, ...]:
    """The external data files ``program`` needs beside its ``.pte`` (``"<name>.ptd"``);
    empty for a program stored in its ``.pte`` alone."""
    return tuple(f"{name}{PTD_SUFFIX}" for name in external_data_files_of(program))


def save(program: ExecutorchProgramManager, path: Union[str, os.PathLike[str]]) -> tuple[Path, ...]:
    """Write ``program``'s ``.pte`` to ``path`` and each external data file it needs
    (`data_files`) beside it.

    A tied table (docs/tied-tables.md) is stored once in ``_default_external_constant.ptd``;
    load the program with it: ``Runtime.get().load_program(pte, data_path=ptd)``, or
    ``xnnfold.run_pte(pte_bytes, inputs, data_path=ptd)``.

    Returns:
        The paths written, the ``.pte`` first.
    """
    if not isinstance(program, ExecutorchProgramManager):
        raise TypeError(
            "xnnfold.save expects the ExecutorchProgramManager of to_executorch(), got "
            f"{type(program).__name__}"
        )
    pte = Path(path)
    if pte.is_dir():
        raise IsADirectoryError(f"xnnfold.save: {str(pte)!r} is a directory; name the .pte file")
    with open(pte, "wb") as file:
        program.write_to_file(file)
    written = [pte]
    if data_files(program):
        program.write_tensor_data_to_file(str(pte.parent))
        written += [pte.parent / name for name in data_files(program)]
    return tuple(written)
