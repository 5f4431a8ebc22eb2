"""Write a lowered program with the external data files it needs, in one call.

executorch names a program's external data file after its tag
(``_default_external_constant.ptd``), so two programs written to one folder with
``write_tensor_data_to_file`` share one file name, and the second replaces the data the
first needs. `save` names each data file after its ``.pte`` instead (``model.pte`` loads
with ``model.ptd``): the files of two programs in one folder never collide. The runtime
finds a program's data by key, not by file name, so the name is the writer's to choose.
Each file is written to a temporary name beside it, synced to disk and then renamed, so
a failed write (or a crash) leaves the previous file whole; a path that is a symbolic
link is written through it, as ``open(path, "wb")`` writes, and the link stays. A new
file gets the mode ``open(path, "wb")`` would give it (``0o666`` less the umask: 0644
under umask 022, 0600 under 077), and a file replaced keeps its mode, as ``open(path,
"wb")`` keeps it: the ``.pte``'s temporary file is created with mode ``0o666``
(executorch writes the ``.ptd`` files with ``open(..., "wb")`` itself) and the kernel
applies the umask, so the umask is never read (reading it means setting it, for every
thread of the process at once).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import stat
import tempfile
from pathlib import Path
from typing import BinaryIO, Iterator, Optional, Union

from executorch.exir import ExecutorchProgramManager

from xnnfold._upstream import external_data_files_of

__all__ = ["data_files", "data_paths", "save"]

PTD_SUFFIX = ".ptd"
# What ``open(path, "wb")`` asks of the kernel for a new file; the umask takes its share.
_NEW_FILE_MODE = 0o666
_TEMPORARY_NAME_ATTEMPTS = 100

PathLike = Union[str, "os.PathLike[str]"]


def data_files(program: ExecutorchProgramManager) -> tuple[str, ...]:
    """The external data files ``program`` needs beside its ``.pte``, as executorch names
    them (``"<tag>.ptd"``); empty for a program stored in its ``.pte`` alone."""
    return tuple(f"{name}{PTD_SUFFIX}" for name in external_data_files_of(program))


def data_paths(program: ExecutorchProgramManager, pte: PathLike) -> tuple[Path, ...]:
    """Where `save` writes the external data files of ``program`` when its ``.pte`` is
    ``pte``: ``<stem>.ptd`` beside it for one file, ``<stem>.<tag>.ptd`` for several.

    Raises:
        ValueError: a data file would be the ``.pte`` itself, or two would share a name.
    """
    path = Path(pte)
    tags = external_data_files_of(program)
    paths: tuple[Path, ...]
    if len(tags) == 1:
        paths = (path.with_name(f"{path.stem}{PTD_SUFFIX}"),)
    else:
        paths = tuple(path.with_name(f"{path.stem}.{tag}{PTD_SUFFIX}") for tag in tags)
    clashes = [p for p in paths if p == path] + [p for i, p in enumerate(paths) if p in paths[:i]]
    if clashes:
        raise ValueError(
            f"xnnfold.save: the external data file {str(clashes[0])!r} of {str(path)!r} "
            "would overwrite the .pte or another of its data files; name the .pte with the "
            "'.pte' suffix and a stem of its own (model.pte is written with model.ptd)"
        )
    return paths


def _existing_mode(path: Path) -> Optional[int]:
    """The permission bits of the file at ``path`` (through a link, as ``open`` writes
    through one), or None when there is none."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        return None


def _create_beside(path: Path) -> tuple[int, Path]:
    """A new, uniquely named file beside ``path``, opened for writing, with the mode a new
    ``open(path, "wb")`` gets: ``O_EXCL`` creates it (never through a link), ``0o666``
    less the process's umask, which the kernel applies."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    for _ in range(_TEMPORARY_NAME_ATTEMPTS):
        temporary = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(temporary, flags, _NEW_FILE_MODE), temporary
        except FileExistsError:
            continue
    raise FileExistsError(f"xnnfold.save: no free temporary name beside {str(path)!r}")


def _replace_keeping_mode(source: Path, target: Path) -> None:
    """Rename ``source`` onto ``target``; a file ``target`` replaces keeps its mode."""
    mode = _existing_mode(target)
    if mode is not None:
        os.chmod(source, mode)
    os.replace(source, target)


def _through_links(path: Path) -> Path:
    """The file ``open(path, "wb")`` writes: a symbolic link's target (the link stays)."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def _synced(file: BinaryIO) -> None:
    """``file``'s bytes on disk before it is renamed into place: a crash after the rename
    then finds the new file whole, not an empty one under the old name."""
    file.flush()
    os.fsync(file.fileno())


@contextlib.contextmanager
def _replacing(path: Path) -> Iterator[BinaryIO]:
    """A file to write ``path``'s bytes to (through a link, `_through_links`), under a
    temporary name beside it; synced and renamed to ``path`` when the block succeeds,
    removed when it fails."""
    path = _through_links(path)
    handle, temporary = _create_beside(path)
    try:
        with os.fdopen(handle, "wb") as file:
            yield file
            _synced(file)
        _replace_keeping_mode(temporary, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)


def _move(source: Path, target: Path) -> None:
    """``source``, which executorch wrote in a staging folder beside the ``.pte``, to
    ``target`` as `_replacing` writes it: through a link, synced and renamed where the
    target is in the ``.pte``'s folder, copied through `_replacing` where a link leads
    elsewhere."""
    target = _through_links(target)
    if target.parent.resolve() != source.parent.parent.resolve():
        with open(source, "rb") as read, _replacing(target) as write:
            shutil.copyfileobj(read, write)
        return
    with open(source, "rb+") as file:
        _synced(file)
    _replace_keeping_mode(source, target)


def save(program: ExecutorchProgramManager, path: PathLike) -> tuple[Path, ...]:
    """Write ``program``'s ``.pte`` to ``path`` and each external data file it needs
    beside it, named after the ``.pte`` (`data_paths`): ``model.pte`` and ``model.ptd``.

    A program whose tied table is stored once (``tie_tables=True``, docs/tied-tables.md)
    loads only with its data file: ``Runtime.get().load_program("model.pte",
    data_path="model.ptd")``, or ``xnnfold.run_pte(pte_bytes, inputs,
    data_path="model.ptd")``. A program without external data is written with the bytes
    ``et.write_to_file`` writes, and loads alone.

    Each file has the mode ``open(path, "wb")`` would give it: a new one ``0o666`` less the
    umask (0644 under umask 022), one replaced its own. Each is written under a temporary
    name beside it and renamed, so a failed write leaves the previous file whole.

    Returns:
        The paths written, the ``.pte`` first, then the data files it loads with.

    Raises:
        IsADirectoryError: ``path`` is a directory.
        ValueError: a data file's name would be the ``.pte``'s (`data_paths`).
    """
    if not isinstance(program, ExecutorchProgramManager):
        raise TypeError(
            "xnnfold.save expects the ExecutorchProgramManager of to_executorch(), got "
            f"{type(program).__name__}"
        )
    pte = Path(path)
    if pte.is_dir():
        raise IsADirectoryError(f"xnnfold.save: {str(pte)!r} is a directory; name the .pte file")
    targets = data_paths(program, pte)
    if targets:
        # Written by executorch under its own names, then renamed to ``targets``.
        staging = Path(tempfile.mkdtemp(dir=pte.parent, prefix=".xnnfold-"))
        try:
            program.write_tensor_data_to_file(str(staging))
            for name, target in zip(data_files(program), targets):
                _move(staging / name, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    with _replacing(pte) as file:
        program.write_to_file(file)
    return (pte, *targets)
