"""Tensors on transparent huge pages (``sglang.utils.hugepages``): aligned, advised, zero, alive as long as any view,
and off with ``SGLANG_HUGE_PAGES=0``."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
import torch

from sglang.utils import hugepages
from sglang.utils.hugepages import HUGE, Arena, huge_empty, huge_zeros


def _vma_flags(addr: int) -> dict[str, str]:
    """The /proc/self/smaps fields of the mapping holding ``addr``."""
    fields: dict[str, str] = {}
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and ":" not in head:
            lo, hi = (int(x, 16) for x in head.split("-"))
            inside = lo <= addr < hi
        elif inside and ":" in head:
            fields[head.rstrip(":")] = line.split(":", 1)[1].strip()
    return fields


def _thp_mode() -> str:
    p = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    text = p.read_text() if p.exists() else "[never]"
    return text.split("[")[1].split("]")[0]


def _advised(addr: int) -> bool:
    """Whether the mapping holding ``addr`` carries MADV_HUGEPAGE (``hg``); True on a kernel without THP, where
    the advice is refused and ignored on purpose (nothing to check)."""
    if not Path("/sys/kernel/mm/transparent_hugepage").exists():
        return True
    return "hg" in _vma_flags(addr).get("VmFlags", "hg").split()


def test_a_large_tensor_is_aligned_advised_and_zero(monkeypatch):
    monkeypatch.delenv(hugepages.ENV, raising=False)
    t = huge_zeros((3, HUGE), torch.float16)  # 12 MiB
    assert t.shape == (3, HUGE) and t.dtype == torch.float16 and t.is_contiguous()
    assert t.data_ptr() % HUGE == 0 and not t.any()
    t.fill_(1)
    flags = _vma_flags(t.data_ptr())
    assert _advised(t.data_ptr())  # madvise(MADV_HUGEPAGE) reached the kernel
    if _thp_mode() != "never" and "THPeligible" in flags:
        assert flags["THPeligible"] == "1"


def test_views_keep_the_mapping_alive():
    t = huge_empty(4 * HUGE, torch.uint8)
    t.fill_(7)
    tail = t[-10:]
    del t
    gc.collect()
    assert tail.tolist() == [7] * 10


def test_small_or_switched_off_is_an_ordinary_tensor(monkeypatch):
    small = huge_zeros((10,), torch.float32)
    assert small.tolist() == [0.0] * 10
    monkeypatch.setenv(hugepages.ENV, "0")

    def no_mapping(*args, **kwargs):
        raise AssertionError("huge pages are off: no mapping of its own")

    # not the VMA's flags: an ordinary allocation may land in memory glibc took earlier in a long test process
    monkeypatch.setattr(hugepages.mmap, "mmap", no_mapping)
    off = huge_zeros((2, HUGE), torch.float32)
    assert off.shape == (2, HUGE) and not off.any()
    monkeypatch.setenv(hugepages.ENV, "maybe")
    with pytest.raises(ValueError, match=hugepages.ENV):
        hugepages.enabled()


def test_the_arena_packs_tensors_end_to_end_on_cache_lines():
    arena = Arena(chunk=4 * HUGE)
    parts = [torch.arange(1000, dtype=torch.float16), torch.randn(3, 5), torch.arange(77, dtype=torch.uint8).view(7, 11)]
    got = [arena.take(p) for p in parts]
    assert all(torch.equal(g, p) and g.dtype == p.dtype and g.shape == p.shape for g, p in zip(got, parts))
    assert all(g.data_ptr() % 64 == 0 for g in got)
    assert got[1].data_ptr() - got[0].data_ptr() == 2048  # 2000 bytes rounded up to a cache line
    assert _advised(got[0].data_ptr())
    big = arena.take(torch.ones(5 * HUGE, dtype=torch.uint8))  # past a chunk: its own mapping
    assert big.data_ptr() % HUGE == 0 and int(big.sum()) == 5 * HUGE
    got[0].zero_()
    assert torch.equal(got[1], parts[1])  # neighbours do not overlap
