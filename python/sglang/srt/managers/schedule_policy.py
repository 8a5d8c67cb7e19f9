"""Order of waiting requests: ``fcfs`` (arrival) or ``lpm`` (longest prefix match first)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sglang.srt.managers.schedule_batch import Req
from sglang.utils.env import env_number

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


# A waiting request that shares at least this many not-yet-cached prompt tokens with one already taken into the
# same prefill batch waits one step, then reuses that prefix from the radix cache instead of computing it again.
# Upstream reads the same variable (default 32) to move such requests to the end of the batch's queue, which saves
# nothing once the prefill budget admits them all; here they leave the batch. 16: sixteen rows of a prefill cost
# more than the one extra step on every CPU measured (docs/engine.md, "Prefill").
IN_BATCH_SHARE_ENV = "SGLANG_IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD"


def in_batch_share_min() -> int:
    """The threshold in tokens; 0 turns the deferral off."""
    return env_number(IN_BATCH_SHARE_ENV, 16, int, minimum=0)


class InBatchPrefixes:
    """The prompts taken into one prefill batch so far, keyed so that a later candidate's shared uncached prefix is a
    set lookup (one tuple per candidate) rather than a scan of the batch.

    Who calls: ``Scheduler._prefill_batch``, one instance per batch it builds. ``tree``: the radix cache (None: no
    prefix cache, nothing to share, nothing deferred)."""

    def __init__(self, tree: Any, min_shared: int) -> None:
        self.tree = tree
        self.min_shared = min_shared if tree is not None else 0
        self.taken: list[tuple[list[int], str | None]] = []
        self._heads: dict[tuple[int, str | None], set[tuple[int, ...]]] = {}

    def should_defer(self, tokens: list[int], lora_id: str | None) -> bool:
        """True when ``tokens`` (the part of a prompt the cache may serve) share at least ``min_shared`` tokens past
        their cached prefix, page-aligned, with a prompt taken earlier in this batch under the same adapter."""
        if not self.min_shared or not self.taken:
            return False
        ps = self.tree.page_size
        upto = self.tree.cached_len(tokens, lora_id) + -(-self.min_shared // ps) * ps
        if upto > len(tokens):
            return False
        key = (upto, lora_id)
        heads = self._heads.get(key)
        if heads is None:
            heads = self._heads[key] = {tuple(t[:upto]) for t, ns in self.taken if ns == lora_id and len(t) >= upto}
        return tuple(tokens[:upto]) in heads

    def take(self, tokens: list[int], lora_id: str | None) -> None:
        """Record a prompt admitted into this batch."""
        if not self.min_shared:
            return
        self.taken.append((tokens, lora_id))
        for upto, ns in self._heads:
            if ns == lora_id and len(tokens) >= upto:
                self._heads[(upto, ns)].add(tuple(tokens[:upto]))
