"""Give the heap's free pages back to the system once a marked delegate is serialized.

A marked delegate's preprocess makes its folded weights, XNNPACK's serializer copies
them into the delegate's bytes, and the hook then drops the folded weights (`_hook`):
what the fold added is free again, but glibc's malloc does not return it. It serves a
request below its mmap threshold from its heap, and raises that threshold (up to
32 MiB on 64-bit) each time a larger mapped chunk is freed, so once the first large
tensors are gone most folded weights come from the heap, and their pages stay resident
after they are freed, scattered between live chunks where the heap's top cannot shrink.
Over the many delegates of a large model, preprocess after preprocess, the lowering's
resident set then grows by what the allocator keeps rather than by what the program
holds (docs/limits.md, "Lowering memory"). ``malloc_trim(0)`` hands every free page of
the heap back (``MADV_DONTNEED``): nothing allocated moves, and the next allocation
takes pages from the system again.

Only glibc has it: elsewhere (musl, macOS, Windows) this is a no-op, and under an
allocator preloaded in glibc's place (jemalloc, tcmalloc) the call reaches glibc's
unused heap and changes nothing.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Callable, Optional

__all__ = ["release_freed_memory"]


@functools.cache
def _malloc_trim() -> Optional[Callable[[int], int]]:
    """The C library's ``malloc_trim``, or None where the process's C library has none."""
    try:
        libc = ctypes.CDLL(None)
    except (OSError, TypeError):
        # Windows' ctypes refuses a null name with a TypeError.
        return None
    trim = getattr(libc, "malloc_trim", None)
    if trim is None:
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def release_freed_memory() -> bool:
    """Return the heap's free pages to the system (glibc's ``malloc_trim(0)``); False
    where the C library cannot."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
