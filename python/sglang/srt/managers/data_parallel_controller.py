"""The data-parallel controller: which replica serves each request (``--dp-size N``).

It lives in the tokenizer manager's process, beside the sockets it routes to:
every request passes it once (``route``) and leaves it once (``finish``), so
its in-flight counts are exact at the moment of the decision, not a scheduler
report half a second old. Policies (``--load-balance-method``):

- ``round_robin``: replicas in turn.
- ``shortest_queue``: the fewest unfinished requests (ties: the replica routed to least).
- ``cache_aware``: as SGLang's router, the replica whose prefix cache most likely
  holds the longest prefix of the prompt, unless the load is imbalanced
  (``max - min > 64`` and ``max > 1.5 * min`` in-flight requests: then the
  shortest queue); a prompt whose best match is under 30% of its tokens goes to
  the replica holding the fewest cached blocks.

What each replica caches is approximated here, never asked of the replica:
the prompts routed to it, as chains of hashed blocks of ``page_size`` tokens
(the radix cache's granularity), least recently used first out beyond the
replica's KV capacity, as its own radix cache evicts.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

CACHE_THRESHOLD = 0.3
BALANCE_ABS_THRESHOLD = 64
BALANCE_REL_THRESHOLD = 1.5


class LoadBalancer(Protocol):
    """One ``--load-balance-method``: picks a replica for a prompt, then hears where it went."""

    def pick(self, ids: list[int], loads: list[int], routed: list[int]) -> int: ...

    def record(self, dp_rank: int, ids: list[int]) -> None: ...


class RoundRobin:
    def __init__(self, dp_size: int, **_: int) -> None:
        self._next = itertools.cycle(range(dp_size))

    def pick(self, ids: list[int], loads: list[int], routed: list[int]) -> int:
        return next(self._next)

    def record(self, dp_rank: int, ids: list[int]) -> None:
        pass


def shortest(loads: list[int], routed: list[int]) -> int:
    """The replica with the fewest unfinished requests; ties go to the one routed to least."""
    return min(range(len(loads)), key=lambda i: (loads[i], routed[i], i))


class ShortestQueue(RoundRobin):
    def pick(self, ids: list[int], loads: list[int], routed: list[int]) -> int:
        return shortest(loads, routed)


class PrefixBlocks:
    """The hashed ``block``-token prefixes of the prompts routed to one replica, in LRU order."""

    def __init__(self, capacity_blocks: int) -> None:
        self.capacity = max(1, capacity_blocks)
        self.blocks: OrderedDict[int, None] = OrderedDict()

    def matched(self, chain: list[int]) -> int:
        """How many leading blocks of ``chain`` this replica holds."""
        n = 0
        for h in chain:
            if h not in self.blocks:
                break
            n += 1
        return n

    def insert(self, chain: list[int]) -> None:
        for h in chain:
            self.blocks[h] = None
            self.blocks.move_to_end(h)
        while len(self.blocks) > self.capacity:
            self.blocks.popitem(last=False)


def block_chain(ids: list[int], block: int) -> list[int]:
    """Hash of each whole ``block``-token prefix of ``ids``: block ``i``'s hash covers tokens ``[0, (i+1)*block)``."""
    chain, h = [], 0
    for start in range(0, len(ids) - block + 1, block):
        h = hash((h, tuple(ids[start : start + block])))
        chain.append(h)
    return chain


class CacheAware:
    def __init__(self, dp_size: int, block: int = 16, capacity_tokens: int = 1 << 20) -> None:
        self.block = block
        self.trees = [PrefixBlocks(capacity_tokens // block) for _ in range(dp_size)]

    def pick(self, ids: list[int], loads: list[int], routed: list[int]) -> int:
        hi, lo = max(loads), min(loads)
        if hi - lo > BALANCE_ABS_THRESHOLD and hi > lo * BALANCE_REL_THRESHOLD:
            return shortest(loads, routed)
        chain = block_chain(ids, self.block)
        matches = [t.matched(chain) for t in self.trees]
        best = max(range(len(matches)), key=lambda i: (matches[i], -loads[i], -i))
        if matches[best] * self.block > CACHE_THRESHOLD * len(ids):
            return best
        return min(range(len(self.trees)), key=lambda i: (len(self.trees[i].blocks), loads[i], routed[i], i))

    def record(self, dp_rank: int, ids: list[int]) -> None:
        self.trees[dp_rank].insert(block_chain(ids, self.block))


LOAD_BALANCERS: dict[str, Callable[..., LoadBalancer]] = {
    "round_robin": RoundRobin,
    "shortest_queue": ShortestQueue,
    "cache_aware": CacheAware,
}


class ControllerError(ValueError):
    pass


class DataParallelController:
    """Routes requests over ``dp_size`` replicas; thread-safe only under the caller's lock.

    Called by the tokenizer manager: ``route`` when a request is sent, ``finish``
    when it ends in any way (finished, failed, aborted); ``finish`` of an unknown
    request is a no-op, so a request may be finished twice.
    """

    def __init__(self, dp_size: int, method: str = "round_robin", block: int = 16, capacity_tokens: int = 1 << 20) -> None:
        if method not in LOAD_BALANCERS:
            raise ControllerError(f"unknown --load-balance-method {method!r}; supported: {', '.join(LOAD_BALANCERS)}")
        self.dp_size, self.method = dp_size, method
        self.policy = LOAD_BALANCERS[method](dp_size, block=block, capacity_tokens=capacity_tokens)
        self.loads = [0] * dp_size
        self.routed = [0] * dp_size
        self.owner: dict[str, int] = {}

    def route(self, rid: str, ids: list[int]) -> int:
        """The replica that serves ``rid`` (recorded until ``finish``)."""
        dp = 0
        if self.dp_size > 1:  # one replica: no policy work (no hashing) on the request path
            dp = self.policy.pick(ids, self.loads, self.routed)
            self.policy.record(dp, ids)
        self.owner[rid] = dp
        self.loads[dp] += 1
        self.routed[dp] += 1
        return dp

    def replica_of(self, rid: str) -> int | None:
        return self.owner.get(rid)

    def finish(self, rid: str) -> None:
        dp = self.owner.pop(rid, None)
        if dp is not None:
            self.loads[dp] -= 1
