"""`_heap`: the heap's free pages go back to the system after each marked preprocess."""

from __future__ import annotations

import ctypes
import os
import platform

import pytest
import torch
from torch import nn
from torch.nn.utils.parametrizations import weight_norm

import xnnfold
from xnnfold.passes.fold import _heap, _hook

from tests._lowering import lower_folding, lower_stock

# glibc's malloc with its default thresholds, which serve a 64 KiB chunk from the heap.
_GLIBC_HEAP = (
    platform.libc_ver()[0] == "glibc"
    and "MALLOC_MMAP_THRESHOLD_" not in os.environ
    and "LD_PRELOAD" not in os.environ
)
_PAGE = os.sysconf("SC_PAGE_SIZE")
# Below glibc's default mmap threshold (128 KiB): served from the heap.
_CHUNK = 64 * 1024
_CHUNKS = 1600


def _resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * _PAGE


@pytest.mark.skipif(not _GLIBC_HEAP, reason="glibc's malloc with its default thresholds")
def test_release_hands_back_free_pages_between_live_chunks() -> None:
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    chunks = [libc.malloc(_CHUNK) for _ in range(_CHUNKS)]
    for chunk in chunks:
        ctypes.memset(chunk, 1, _CHUNK)
    # Every other chunk freed: 50 MiB free in holes the heap's top cannot give back.
    for chunk in chunks[::2]:
        libc.free(chunk)
    before = _resident_bytes()
    assert _heap.release_freed_memory()
    released = before - _resident_bytes()
    for chunk in chunks[1::2]:
        libc.free(chunk)
    assert released > _CHUNK * _CHUNKS // 4, f"released {released} bytes"


class _TwoNormed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = weight_norm(nn.Conv1d(4, 8, 3))
        self.linear = weight_norm(nn.Linear(6, 5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(torch.relu(self.conv(x)))


def _model() -> tuple[nn.Module, tuple[torch.Tensor]]:
    torch.manual_seed(0)
    return _TwoNormed().eval(), (torch.randn(1, 4, 8),)


def _count_releases(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    monkeypatch.setattr(_hook, "release_freed_memory", lambda: calls.append(1) or True)
    return calls


@pytest.mark.runtime
def test_each_marked_preprocess_releases_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _count_releases(monkeypatch)
    lowered = lower_folding(*_model())
    assert len(xnnfold.explain(lowered.edge).folded) == 2
    assert lowered.summary.delegates >= 1
    assert len(calls) == lowered.summary.delegates


@pytest.mark.runtime
def test_an_unmarked_preprocess_releases_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    xnnfold.install_preprocess_hook()
    calls = _count_releases(monkeypatch)
    try:
        lower_stock(*_model())
    finally:
        xnnfold.uninstall_preprocess_hook()
    assert not calls
