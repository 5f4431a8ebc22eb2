"""A sweep's result lines: their statuses, and the JSON-lines file a rerun resumes from."""

from __future__ import annotations

import json
import os
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
    appending: two drivers (a screen and a lowering run) can share one results file."""
    line = (json.dumps(result) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
