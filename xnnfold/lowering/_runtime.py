"""Run a `.pte` in-process through `executorch.runtime` and time it."""

from __future__ import annotations

import inspect
import os
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Union

import torch
from executorch.exir import ExecutorchProgramManager
from executorch.runtime import Runtime

from xnnfold import _upstream
from xnnfold.lowering._save import data_files

__all__ = ["LoadedProgram", "run_pte"]

DataPath = Union[str, "os.PathLike[str]"]
_DATA_PATH = "data_path"


def _runtime_loads_data() -> bool:
    """Whether the installed `executorch.runtime` takes an external data file (1.5.0 on)."""
    return _DATA_PATH in inspect.signature(Runtime.load_program).parameters


class LoadedProgram:
    """A loaded `.pte` method.

    Holds the runtime `Program` for as long as the `Method`: a method borrows from its
    program, and a program freed first makes ``execute`` crash at random. ``data_path``
    is the external data file (``.ptd``) the program needs, if any (`xnnfold.save`
    writes it beside the ``.pte``). executorch 1.4.1's `executorch.runtime` loads no
    external data; there the program runs on the C++ `Module` its pybindings expose, which
    does.
    """

    def __init__(
        self, buffer: bytes, method: str = "forward", *, data_path: Optional[DataPath] = None
    ) -> None:
        self._buffer = buffer
        self._files: Optional[tempfile.TemporaryDirectory[str]] = None
        self._execute: Callable[[list[Any]], Sequence[Any]]
        if data_path is None:
            self._program: Any = Runtime.get().load_program(buffer)
            self._method = self._program.load_method(method)
            self._execute = self._method.execute
        elif _runtime_loads_data():
            self._program = Runtime.get().load_program(buffer, data_path=os.fspath(data_path))
            self._method = self._program.load_method(method)
            self._execute = self._method.execute
        else:
            # The C++ Module loads from a path only.
            self._files = tempfile.TemporaryDirectory(prefix="xnnfold-")
            pte = Path(self._files.name) / "program.pte"
            pte.write_bytes(buffer)
            self._program = _upstream.load_module_with_data(
                str(pte), data_path=os.fspath(data_path)
            )
            self._execute = lambda inputs: self._program.run_method(method, tuple(inputs))

    @classmethod
    def of(cls, program: ExecutorchProgramManager, method: str = "forward") -> LoadedProgram:
        """``program``'s ``method``, loaded with the external data file it needs, if any.

        A program whose tied table is stored once (docs/tied-tables.md) does not load from
        its ``.buffer`` alone; this writes the ``.ptd`` to a temporary directory that lives
        as long as the returned object, and loads the program with it.
        """
        names = data_files(program)
        if not names:
            return cls(program.buffer, method)
        if len(names) > 1:
            raise ValueError(
                f"xnnfold.LoadedProgram.of: the program needs {len(names)} external data "
                f"files ({', '.join(names)}), and executorch.runtime loads one; write them "
                "with xnnfold.save and load the .pte with the C++ Module, which takes several"
            )
        directory = tempfile.mkdtemp(prefix="xnnfold-")
        try:
            program.write_tensor_data_to_file(directory)
            loaded = cls(program.buffer, method, data_path=Path(directory) / names[0])
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise
        # The runtime reads the data file while the program lives: removed after it.
        weakref.finalize(loaded, shutil.rmtree, directory, ignore_errors=True)
        return loaded

    def __call__(self, inputs: Sequence[torch.Tensor]) -> list[Any]:
        return list(self._execute(list(inputs)))


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
