"""A sweep's result lines: their statuses, and the JSON-lines file a rerun resumes from."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

# Statuses of a result line.
SKIPPED = "skipped"  # out of reach: not built, fed or exported (its stage and reason say)
NOT_A_MODEL = "not a model class"
NO_CANDIDATE = "no computed GEMM argument"
CANDIDATE = "candidate, not lowered yet"
NOT_COMPUTED = "no computed GEMM"  # lowered; `explain` found no computed weight or bias
COMPUTED = "computed GEMM"  # lowered (or tried to), with a computed weight or bias
TIMED_OUT = "lowering over the timeout"  # a partitioner did not lower within the timeout
# The statuses of a class that reached the screen, and of one that was lowered.
SCREENED = frozenset({NO_CANDIDATE, CANDIDATE, NOT_COMPUTED, COMPUTED, TIMED_OUT})
LOWERED = frozenset({NOT_COMPUTED, COMPUTED, TIMED_OUT})
# Errors of a worker out of its address space (`engine.worker.WORKER_MEMORY`), which the
# classes before it may have filled (oneDNN's "could not create a primitive" among them).
_OUT_OF_MEMORY = ("can't allocate memory", "could not create a primitive", "MemoryError")


def out_of_memory(error: str) -> bool:
    """Whether ``error`` (a reason or a partitioner's entry's error) is a worker's memory
    running out: the sweep's limit, not the model's or a partitioner's failure."""
    return any(sign in error for sign in _OUT_OF_MEMORY)


def read_results(path: Path) -> dict[str, dict[str, Any]]:
    """The latest result line of each class in ``path``."""
    if not path.exists():
        return {}
    return {r["class"]: r for r in (json.loads(line) for line in path.read_text().splitlines())}


def append(path: Path, result: dict[str, Any]) -> None:
    """Append ``result`` to ``path`` as one line, in one ``write`` to a file opened for
    appending: two drivers (a screen and a lowering run) can share one results file
    (though not with `compact`)."""
    line = (json.dumps(result) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def compact(path: Path) -> tuple[int, int]:
    """Rewrite ``path`` keeping only the lines `read_results` reads, the latest of each
    class, as they were written, in the order the classes first appear; the number of
    lines before and after. A compacted file is read as it was (in the same order), and
    compacting it again changes no byte.

    The new file is written beside the old (a temporary file in the same folder, with
    the old one's mode), synced, then renamed over it: a reader sees the old file or the
    new, whole, and a crash leaves one of them. A line appended between the read and the
    rename is lost, so this must not run while a sweep of the same library appends; the
    lines it drops are in git's history.
    """
    if not path.exists():
        return 0, 0
    lines = path.read_text().splitlines(keepends=True)
    # Each class's latest line, where its first line was: `read_results`'s dict keeps
    # the classes in the order they first appear, and the report lists ties in it.
    latest: dict[str, str] = {}
    for line in lines:
        latest[json.loads(line)["class"]] = line if line.endswith("\n") else line + "\n"
    kept = list(latest.values())
    mode = path.stat().st_mode & 0o7777
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as file:
            file.writelines(kept)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    # The rename itself, synced with the folder that holds it.
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
    return len(lines), len(kept)
