"""The prefix cache: page-aligned matching, sharing, locking, LRU eviction."""

from __future__ import annotations

import pytest

from sglang.srt.mem_cache.allocator import PagedTokenToKVPoolAllocator
from sglang.srt.mem_cache.radix_cache import RadixCache


@pytest.fixture
def cache():
    alloc = PagedTokenToKVPoolAllocator(64, 2)
    return RadixCache(alloc, 2), alloc


def test_match_is_page_aligned(cache):
    c, a = cache
    c.insert([1, 2, 3, 4], a.alloc(2))
    pages, _ = c.match_prefix([1, 2, 3, 9, 9])
    assert len(pages) == 1  # the second page differs in its last token


def test_insert_returns_tree_pages_for_shared_positions(cache):
    c, a = cache
    first = a.alloc(3)
    c.insert([1, 2, 3, 4, 5, 6], first)
    mine = a.alloc(3)
    tree_pages, _ = c.insert([1, 2, 3, 4, 7, 8], mine)
    assert tree_pages[:2] == first[:2] and tree_pages[2] == mine[2]
    assert c.cached_pages == 4


def test_split_keeps_both_branches(cache):
    c, a = cache
    p = a.alloc(3)
    c.insert([1, 2, 3, 4, 5, 6], p)
    q = a.alloc(3)
    c.insert([1, 2, 9, 9, 9, 9], q)
    assert c.match_prefix([1, 2, 3, 4, 5, 6])[0] == p
    assert c.match_prefix([1, 2, 9, 9, 9, 9])[0] == [p[0], *q[1:]]


def test_locked_nodes_are_not_evicted(cache):
    c, a = cache
    _, node = c.insert([1, 2, 3, 4], a.alloc(2))
    c.inc_lock_ref(node)
    assert c.evict(10) == 0
    c.dec_lock_ref(node)
    assert c.evict(10) == 2 and a.available_pages() == 32


def test_eviction_is_least_recently_used_first(cache):
    c, a = cache
    old = a.alloc(1)
    c.insert([1, 1], old)
    new = a.alloc(1)
    c.insert([2, 2], new)
    c.match_prefix([1, 1])  # touch the older entry
    c.evict(1)
    assert c.match_prefix([1, 1])[0] == old and c.match_prefix([2, 2])[0] == []


def test_unbalanced_unlock_is_an_invariant_error(cache):
    c, a = cache
    _, node = c.insert([1, 2], a.alloc(1))
    with pytest.raises(AssertionError, match="unbalanced"):
        c.dec_lock_ref(node)


@pytest.mark.parametrize("tokens", [[1, 2, 3, 4, 5, 6, 7], [1, 2, 3, 9, 5], [1, 2, 3, 4], [7, 7, 7], [1], []])
def test_cached_len_is_what_match_prefix_returns(cache, tokens):
    c, a = cache
    c.insert([1, 2, 3, 4, 5, 6], a.alloc(3))
    c.insert([1, 2, 3, 4, 8, 8], a.alloc(3))
    probe = c.cached_len(tokens)
    assert probe == len(c.match_prefix(tokens)[0]) * 2


def test_cached_len_leaves_the_tree_and_its_lru_order_alone(cache):
    c, a = cache
    old = a.alloc(2)
    c.insert([1, 1, 3, 3], old)
    c.insert([2, 2], a.alloc(1))
    root_children = dict(c.root.children)
    assert c.cached_len([1, 1, 9, 9]) == 2  # a partial match: match_prefix would split the node here
    assert c.root.children == root_children and len(c.root.children[(1, 1)].key) == 4
    c.evict(2)  # [1, 1, 3, 3] is still the least recently used
    assert c.match_prefix([1, 1, 3, 3])[0] == [] and c.cached_len([2, 2]) == 2


def test_lpm_orders_by_arrival_beyond_its_queue_limit(cache):
    from sglang.srt.managers.schedule_policy import LPM_MAX_WAITING, order_waiting

    class Waiting:
        def __init__(self, ids: list[int]) -> None:
            self.fill_ids, self.lora_id = ids, None

    c, a = cache
    c.insert([5, 5, 5, 5], a.alloc(2))
    queue = [Waiting([1, 1, 1]), Waiting([5, 5, 5, 5, 1])]
    assert order_waiting(queue, "lpm", c) == queue[::-1]
    long_queue = queue + [Waiting([1, 1, 1]) for _ in range(LPM_MAX_WAITING)]
    assert order_waiting(long_queue, "lpm", c) == long_queue
