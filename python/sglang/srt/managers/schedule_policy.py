"""Order of waiting requests: ``fcfs`` (arrival) or ``lpm`` (longest prefix match first)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sglang.srt.managers.schedule_batch import Req

POLICIES = ("fcfs", "lpm")


def order_waiting(waiting: Iterable[Req], policy: str, tree: Any) -> list[Req]:
    reqs = list(waiting)
    if policy == "fcfs" or tree is None:
        return reqs
    if policy == "lpm":
        # sorted() is stable: equal matches keep arrival order
        return sorted(reqs, key=lambda r: -len(tree.match_prefix(r.fill_ids[:-1])[0]))
    raise ValueError(f"unknown schedule policy {policy!r}; supported: {POLICIES} (--schedule-policy)")
