"""``sglang.utils.malloc.keep_heap``: after it, a step-sized buffer comes from the heap, not a fresh mapping."""

from __future__ import annotations

import ctypes
import platform
from pathlib import Path

import pytest

from sglang.utils import malloc


def _in_heap(addr: int) -> bool:
    for line in Path("/proc/self/maps").read_text().splitlines():
        parts = line.split()
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        if lo <= addr < hi:
            return parts[-1] == "[heap]"
    return False


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_a_4_mb_buffer_comes_from_the_heap_after_keep_heap(monkeypatch):
    monkeypatch.delenv(malloc.ENV, raising=False)
    assert malloc.keep_heap()
    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_void_p]
    p = libc.malloc(4 << 20)  # below MMAP_THRESHOLD: no mapping of its own
    try:
        assert p and _in_heap(p)
    finally:
        libc.free(p)


def test_switched_off_it_leaves_the_allocator_alone(monkeypatch):
    monkeypatch.setenv(malloc.ENV, "0")
    assert malloc.keep_heap() is False
    monkeypatch.setenv(malloc.ENV, "sometimes")
    with pytest.raises(ValueError, match=malloc.ENV):
        malloc.keep_heap()


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_it_hands_the_free_heap_back_first(monkeypatch):
    # 64 blocks of 1 MiB from the heap (under the raised mmap threshold), all freed: after keep_heap the free pages
    # below the heap's top are returned, so this process's resident memory falls by most of the 64 MiB
    monkeypatch.delenv(malloc.ENV, raising=False)
    assert malloc.keep_heap()
    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_void_p]

    def rss() -> int:
        return int(next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("VmRSS")).split()[1])

    blocks = [libc.malloc(1 << 20) for _ in range(65)]
    for p in blocks:
        ctypes.memset(p, 1, 1 << 20)  # resident
    guard = blocks.pop()  # keeps the heap's top in use: only malloc_trim(0) returns pages below it
    for p in blocks:
        libc.free(p)
    before = rss()
    assert malloc.keep_heap()
    try:
        assert before - rss() > 48 << 10, (before, rss())  # kB
    finally:
        libc.free(guard)
