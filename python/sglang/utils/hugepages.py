"""Tensors on transparent huge pages, for the memory the CPU engine streams every step (packed weights, the KV pool).

A decode step reads every weight once and, at batch, every cached token's K/V row. On 4 KiB pages that is
one TLB entry per 4 KiB and, on CPUs whose prefetchers stop at a page boundary, a new stream every 4 KiB;
2 MiB pages remove both. Linux backs a range with huge pages when the range is 2 MiB-aligned and advised
``MADV_HUGEPAGE`` before it is first touched (the default ``madvise`` mode of
``/sys/kernel/mm/transparent_hugepage/enabled``; ``always`` does it anyway, ``never`` not at all), so this
module maps anonymous memory itself, aligned and advised, and hands it to torch without a copy.

``SGLANG_HUGE_PAGES=0`` turns it off (ordinary torch allocations). Stdlib and torch only; nothing here runs at import.
"""

from __future__ import annotations

import ctypes
import mmap
import threading

import torch

from sglang.utils.env import env_flag

HUGE = 2 << 20
ENV = "SGLANG_HUGE_PAGES"
_ALIGN = 64  # a slice of an arena starts on a cache line


def enabled() -> bool:
    """Whether huge-page allocation is on (``SGLANG_HUGE_PAGES``, default on; Linux only)."""
    return hasattr(mmap, "MADV_HUGEPAGE") and env_flag(ENV, True)


def huge_empty(numel: int, dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised 1-D tensor of ``numel`` elements on its own 2 MiB-aligned, ``MADV_HUGEPAGE``-advised mapping
    (an ordinary ``torch.empty`` when huge pages are off). The mapping lives as long as the tensor or any view of it."""
    nbytes = numel * torch.empty((), dtype=dtype).element_size()
    if not enabled() or nbytes < HUGE:
        return torch.empty(numel, dtype=dtype)
    mm = mmap.mmap(-1, nbytes + HUGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    view = ctypes.c_char.from_buffer(mm)
    base = ctypes.addressof(view)
    del view  # the ctypes view's buffer export ends here
    skip = -base % HUGE
    try:
        mm.madvise(mmap.MADV_HUGEPAGE, skip, nbytes)
    except OSError:  # a kernel without THP: the mapping still works, on small pages
        pass
    # the storage holds a reference to ``mm``, which keeps the mapping alive; nothing else may see ``mm`` (closing it
    # would unmap memory the tensor still points at)
    return torch.frombuffer(mm, dtype=torch.uint8, count=nbytes, offset=skip).view(dtype)


def huge_zeros(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """``torch.zeros(shape, dtype=dtype)`` on huge pages. Written through, as ``torch.zeros`` is: the memory is
    taken now (a KV pool too large for the machine fails at start, not mid-serving)."""
    n = 1
    for d in shape:
        n *= d
    return huge_empty(n, dtype).view(shape).zero_()


class Arena:
    """Packed weights laid end to end on huge pages: ``take(t)`` copies ``t`` into the arena and returns the copy.

    Small tensors (one layer's product is 0.3-1.7 MB, under a huge page) share 2 MiB pages this way. Chunks of
    ``chunk`` bytes are mapped as needed; the untouched tail of the last one is never resident. Thread-safe."""

    def __init__(self, chunk: int = 32 << 20) -> None:
        self.chunk = chunk
        self._cur: torch.Tensor | None = None
        self._used = 0
        self._lock = threading.Lock()

    def take(self, t: torch.Tensor) -> torch.Tensor:
        t = t.contiguous()
        if not enabled():
            return t
        n = t.numel() * t.element_size()
        if n >= self.chunk:
            out = huge_empty(t.numel(), t.dtype).view(t.shape)
            out.copy_(t)
            return out
        with self._lock:
            if self._cur is None or self._used + n > self._cur.numel():
                self._cur, self._used = huge_empty(self.chunk, torch.uint8), 0
            view = self._cur[self._used : self._used + n]
            self._used += -(-n // _ALIGN) * _ALIGN
        out = view.view(t.dtype).view(t.shape)
        out.copy_(t)
        return out
