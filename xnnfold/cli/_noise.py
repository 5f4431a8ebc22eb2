"""Upstream import noise the ``xnnfold`` command keeps out of a user's terminal.

Importing torch, torchao and executorch on a CPU-only machine logs warnings that say
nothing about the user's model: torchao cannot load its CUDA-only extensions (``Failed to
load .../torchao/_C_mxfp8...so``) and torch announces that an Enum registered by torchao
is now natively supported. A new user reads them as a broken install. The command drops
exactly these records (matched by logger and message), shows them with ``--verbose``, and
lets every other record through: a real error still reaches the terminal.
In a user's own process nothing is filtered; docs/limits.md lists each of these lines
with its source.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

__all__ = ["KNOWN_HARMLESS", "quiet_upstream_noise"]

# (logger name, pattern over the formatted message). Loggers are matched exactly: a
# filter sits on the logger object, so records of its children are not touched.
KNOWN_HARMLESS: Final[tuple[tuple[str, re.Pattern[str]], ...]] = (
    # torchao's prebuilt wheel ships a CUDA sm90 extension and a CPython 3.10 build of its
    # mxfp8 one beside its CPU ones; only those two files' failures are dropped.
    (
        "torchao",
        re.compile(
            r"^Failed to load \S*/torchao/"
            r"(_C_cutlass_90a\.abi3\.so|_C_mxfp8\.cpython-310-[\w-]+\.so): "
        ),
    ),
    ("torch.utils._pytree", re.compile(r"is an Enum subclass and is now natively supported")),
)


class _DropKnownHarmless(logging.Filter):
    def __init__(self, pattern: re.Pattern[str]) -> None:
        super().__init__()
        self.pattern = pattern
        self.dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if self.pattern.search(record.getMessage()):
            self.dropped += 1
            return False
        return True


@contextmanager
def quiet_upstream_noise() -> Iterator[list[logging.Filter]]:
    """Drop the `KNOWN_HARMLESS` records while the block runs; restore on exit."""
    installed = []
    for name, pattern in KNOWN_HARMLESS:
        drop = _DropKnownHarmless(pattern)
        logging.getLogger(name).addFilter(drop)
        installed.append((name, drop))
    try:
        yield [drop for _, drop in installed]
    finally:
        for name, drop in installed:
            logging.getLogger(name).removeFilter(drop)
