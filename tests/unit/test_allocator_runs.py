"""The paged allocator keeps a request's pages in runs (decode attention reads a run at bandwidth), and the
scheduler's KV mixin takes pages ahead only while the pool has room."""

from __future__ import annotations

import random

import pytest

from sglang.srt.managers.schedule_batch import Req
from sglang.srt.managers.scheduler_kv import RUN_AHEAD_TOKENS, KVPages
from sglang.srt.mem_cache.allocator import BasePagedAllocator, PagedTokenToKVPoolAllocator
from sglang.srt.sampling.sampling_params import SamplingParams


def test_a_run_continues_where_its_next_page_is_free():
    a = PagedTokenToKVPoolAllocator(64, 1)
    first = a.alloc_run(5)
    assert first == [0, 1, 2, 3, 4]
    other = a.alloc_run(3)
    assert other == [5, 6, 7]
    assert a.alloc_run(2, after=7) == [8, 9]  # the run ending at 7 goes on
    assert a.alloc_run(1, after=4) == [10]  # 5 is taken: a new run starts from the free list


def test_pages_ahead_extend_the_run_only():
    a = PagedTokenToKVPoolAllocator(64, 1)
    a.alloc_run(4)  # 0..3
    assert a.alloc_run(1, after=3) == [4]  # another request's page, right after the first run
    got = a.alloc_run(2, after=3, ahead=10)
    assert got[:2] == [5, 6] and got == list(range(5, 17))  # 4 is taken: the run starts at 5 and goes on
    taken = a.alloc_run(1, after=20)
    assert taken == [21]
    near = a.alloc_run(1, after=16, ahead=8)
    assert near == [17, 18, 19, 20]  # stops at the first page that is not free


def test_pages_freed_together_come_back_in_ascending_order():
    a = PagedTokenToKVPoolAllocator(32, 1)
    pages = a.alloc(10)
    a.free(pages[2:8])
    assert a.alloc(6) == [2, 3, 4, 5, 6, 7]


def test_failed_allocations_take_nothing_and_frees_are_checked():
    a = PagedTokenToKVPoolAllocator(8, 1)
    a.alloc(6)
    assert a.alloc_run(3, after=5, ahead=4) is None and a.available_pages() == 2
    with pytest.raises(ValueError, match="twice"):
        a.free([1, 1])
    with pytest.raises(ValueError, match="double free"):
        a.free([7])
    with pytest.raises(ValueError, match="ahead"):
        a.alloc_run(1, ahead=-1)


def test_random_traffic_never_hands_out_a_page_twice():
    rng = random.Random(0)
    a = PagedTokenToKVPoolAllocator(96, 1)
    held: list[list[int]] = []
    for _ in range(3000):
        if held and rng.random() < 0.45:
            a.free(held.pop(rng.randrange(len(held))))
        else:
            after = held[rng.randrange(len(held))][-1] if held and rng.random() < 0.7 else None
            got = a.alloc_run(rng.randint(0, 4), after, rng.randint(0, 6))
            if got:
                held.append(got)
        flat = [p for run in held for p in run]
        assert len(flat) == len(set(flat)) and a.available_pages() + len(flat) == a.num_pages
        assert len(a._stack) <= 2 * a.num_pages + 6  # stale entries are dropped


def test_an_allocator_with_alloc_only_keeps_working():
    class Plain(BasePagedAllocator):  # a platform plugin's allocator written before alloc_run
        def __init__(self, size: int, page_size: int) -> None:
            super().__init__(size, page_size)
            self.free_pages = list(range(self.num_pages))

        def alloc(self, num_pages: int) -> list[int] | None:
            if num_pages > len(self.free_pages):
                return None
            got, self.free_pages = self.free_pages[:num_pages], self.free_pages[num_pages:]
            return got

        def free(self, pages: list[int]) -> None:
            self.free_pages += pages

        def available_pages(self) -> int:
            return len(self.free_pages)

        def clear(self) -> None:
            self.free_pages = list(range(self.num_pages))

    p = Plain(16, 1)
    assert p.alloc_run(3, after=10, ahead=5) == [0, 1, 2]


class _Pages(KVPages):
    def __init__(self, size: int, page_size: int) -> None:
        self.allocator = PagedTokenToKVPoolAllocator(size, page_size)
        self.tree, self.page_size, self.spec = None, page_size, None


def _req() -> Req:
    return Req("r", [1, 2, 3], SamplingParams(), None, False)  # type: ignore[arg-type]


@pytest.mark.parametrize("page_size", [1, 4])
def test_a_request_takes_its_next_pages_ahead_while_the_pool_has_room(page_size):
    kv = _Pages(1024, page_size)
    req = _req()
    assert kv._ensure_pages(req, 3 * page_size)
    assert req.pages == list(range(RUN_AHEAD_TOKENS // page_size))  # 3 needed, the rest of the run ahead
    assert kv._ensure_pages(req, RUN_AHEAD_TOKENS) and len(req.pages) == RUN_AHEAD_TOKENS // page_size  # nothing new
    assert kv._ensure_pages(req, RUN_AHEAD_TOKENS + 1)
    assert req.pages == list(range(2 * RUN_AHEAD_TOKENS // page_size))  # the next run continues the first


def test_a_full_pool_gives_what_is_needed_only():
    kv = _Pages(64, 1)
    kv.allocator.alloc(40)  # 24 free: taking 16 would leave less than a quarter
    req = _req()
    assert kv._ensure_pages(req, 2) and len(req.pages) == 2
