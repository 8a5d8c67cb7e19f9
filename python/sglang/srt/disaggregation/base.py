"""Transfer states, the transfer error, and the KV layout both sides must agree on."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any


class KVPoll(enum.IntEnum):
    """A request's transfer state, on either side (upstream's values)."""

    Failed = 0
    Bootstrapping = 1  # decode: looking up its prefill server; prefill: waiting for the decode server's page list
    WaitingForInput = 2  # decode: waiting for free KV pages; prefill: queued for, or in, its prefill forward
    Transferring = 3  # pages and the first token are on their way
    Success = 4


class KVTransferError(RuntimeError):
    """One request's KV transfer failed; the message names the side and the cause."""


@dataclass(frozen=True)
class KVLayout:
    """The KV pool's buffers as raw memory: one K and one V buffer per layer, ``page_bytes`` bytes per page."""

    ptrs: tuple[int, ...]
    page_bytes: tuple[int, ...]
    page_size: int
    dtype: str

    @classmethod
    def of_pool(cls, pool: Any) -> KVLayout:
        bufs = [*pool.k_buffer, *pool.v_buffer]
        return cls(tuple(b.data_ptr() for b in bufs), tuple(b[0].numel() * b.element_size() * pool.page_size for b in bufs),
                   pool.page_size, str(pool.dtype).replace("torch.", ""))

    def buffers(self, num_pages: int) -> list[tuple[int, int]]:
        """``(address, length)`` of every buffer (what the transfer engine registers)."""
        return [(p, n * num_pages) for p, n in zip(self.ptrs, self.page_bytes)]

    def mismatch(self, other: dict[str, Any]) -> str | None:
        """Why a peer's layout (as sent over the wire) cannot take these pages, or ``None``."""
        mine = {"page_size": self.page_size, "dtype": self.dtype, "page_bytes": list(self.page_bytes)}
        for key, value in mine.items():
            if other.get(key) != value:
                return f"{key} differs (prefill {other.get(key)!r}, decode {value!r}): start both servers with the same model, " \
                       "--page-size and --kv-cache-dtype"
        return None

    def wire(self) -> dict[str, Any]:
        return {"ptrs": list(self.ptrs), "page_bytes": list(self.page_bytes), "page_size": self.page_size, "dtype": self.dtype}


def page_runs(src: list[int], dst: list[int]) -> list[tuple[int, int, int]]:
    """``(src_page, dst_page, count)`` runs where both page lists are consecutive: one transfer each per buffer."""
    runs: list[tuple[int, int, int]] = []
    for s, d in zip(src, dst):
        if runs and runs[-1][0] + runs[-1][2] == s and runs[-1][1] + runs[-1][2] == d:
            runs[-1] = (runs[-1][0], runs[-1][1], runs[-1][2] + 1)
        else:
            runs.append((s, d, 1))
    return runs
