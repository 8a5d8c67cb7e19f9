"""Order of waiting requests: ``fcfs`` (arrival) or ``lpm`` (longest prefix match first)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sglang.srt.managers.schedule_batch import Req

POLICIES = ("fcfs", "lpm")
# Beyond this many waiting requests lpm orders by arrival, as the reference does:
# probing every prompt against the tree on every step would cost more than it saves.
LPM_MAX_WAITING = 128


def order_waiting(waiting: Iterable[Req], policy: str, tree: Any) -> list[Req]:
    reqs = list(waiting)
    if policy == "fcfs" or tree is None:
        return reqs
    if policy == "lpm":
        if len(reqs) > LPM_MAX_WAITING:
            return reqs
        # a read-only probe (no node split, no LRU refresh); sorted() is stable: equal matches keep arrival order
        return sorted(reqs, key=lambda r: -tree.cached_len(r.fill_ids[:-1], r.lora_id))
    raise ValueError(f"unknown schedule policy {policy!r}; supported: {POLICIES} (--schedule-policy)")
