"""A small progress bar on stderr while weights load (silent when not a TTY and quiet)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


def progress(items: Iterable[T], desc: str) -> Iterator[T]:
    seq = list(items)
    n = len(seq)
    quiet = os.environ.get("SGLANG_QUIET_LOAD") == "1"
    t0 = time.perf_counter()
    step = max(1, n // 20)
    for i, item in enumerate(seq, 1):
        yield item
        if not quiet and (i % step == 0 or i == n):
            bar = "#" * (20 * i // n)
            sys.stderr.write(f"\r{desc}: [{bar:<20}] {i}/{n} {time.perf_counter() - t0:5.1f}s")
            if i == n:
                sys.stderr.write("\n")
            sys.stderr.flush()
