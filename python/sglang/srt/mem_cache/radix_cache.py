"""Prefix cache: a radix tree over token ids whose nodes own KV pages.

Keys are page-aligned: a node's key holds whole pages of tokens and its
``pages`` the KV page ids for them, so requests sharing a prefix share pages.
A node in use by a request is locked (``lock_ref`` > 0 on it and its
ancestors) and never evicted; unlocked leaves are evicted least recently used
first, their pages returned to the allocator.

Every method takes a ``namespace`` (None: the base model): each LoRA adapter's KV lives under its own
root, keyed by the server-minted ``lora_id`` of the request (never a client field), so the same prompt
under two adapters, or under an adapter and the base model, never shares pages.
"""

from __future__ import annotations

import heapq
import itertools
import time
from typing import Any

_tick = itertools.count()


class TreeNode:
    __slots__ = ("children", "key", "last_access", "lock_ref", "pages", "parent", "uid")

    def __init__(self, parent: TreeNode | None = None, key: tuple[int, ...] = (), pages: list[int] | None = None) -> None:
        self.parent = parent
        self.key = key
        self.pages = pages or []
        self.children: dict[tuple[int, ...], TreeNode] = {}
        self.lock_ref = 0
        self.last_access = time.monotonic()
        self.uid = next(_tick)

    def __lt__(self, other: TreeNode) -> bool:
        return (self.last_access, self.uid) < (other.last_access, other.uid)


class RadixCache:
    def __init__(self, allocator: Any, page_size: int) -> None:
        self.allocator = allocator
        self.page_size = page_size
        self.root = TreeNode()
        self.root.lock_ref = 1  # the root is never evicted
        self.ns_roots: dict[str, TreeNode] = {}  # an adapter's root: a child of the root, held outside its children
        self.cached_pages = 0

    def _root(self, namespace: str | None) -> TreeNode:
        if namespace is None:
            return self.root
        node = self.ns_roots.get(namespace)
        if node is None:
            node = self.ns_roots[namespace] = TreeNode(self.root)
        return node

    def _first(self, tokens: tuple[int, ...] | list[int], i: int) -> tuple[int, ...]:
        return tuple(tokens[i : i + self.page_size])

    def match_prefix(self, tokens: list[int], namespace: str | None = None) -> tuple[list[int], TreeNode]:
        """Pages of the longest cached page-aligned prefix of ``tokens``, and its node."""
        ps, node, pages, i = self.page_size, self._root(namespace), [], 0
        node.last_access = time.monotonic()
        while len(tokens) - i >= ps:
            child = node.children.get(self._first(tokens, i))
            if child is None:
                break
            n = self._common_pages(child.key, tokens, i)
            if n < len(child.key) // ps:
                child = self._split(child, n)
            child.last_access = time.monotonic()
            pages.extend(child.pages)
            i += len(child.key)
            node = child
        return pages, node

    def cached_len(self, tokens: list[int], namespace: str | None = None) -> int:
        """Tokens of the longest cached page-aligned prefix of ``tokens``: a read-only probe.

        Unlike ``match_prefix`` it splits no node and refreshes no LRU time, so
        ordering a queue by it leaves the tree and its eviction order as they were.
        """
        node = self.root if namespace is None else self.ns_roots.get(namespace)
        if node is None:  # an adapter nothing was cached for (and a probe creates no root)
            return 0
        ps, i = self.page_size, 0
        while len(tokens) - i >= ps:
            child = node.children.get(self._first(tokens, i))
            if child is None:
                break
            n = self._common_pages(child.key, tokens, i)
            i += n * ps
            if n < len(child.key) // ps:
                break
            node = child
        return i

    def _common_pages(self, key: tuple[int, ...], tokens: list[int], start: int) -> int:
        ps, n = self.page_size, 0
        while (n + 1) * ps <= len(key) and start + (n + 1) * ps <= len(tokens):
            if tuple(tokens[start + n * ps : start + (n + 1) * ps]) != key[n * ps : (n + 1) * ps]:
                break
            n += 1
        return n

    def _split(self, node: TreeNode, n_pages: int) -> TreeNode:
        """Cut ``node`` after ``n_pages``; returns the new upper part."""
        ps = self.page_size
        upper = TreeNode(node.parent, node.key[: n_pages * ps], node.pages[:n_pages])
        upper.lock_ref = node.lock_ref
        assert node.parent is not None
        node.parent.children[self._first(upper.key, 0)] = upper
        node.key, node.pages, node.parent = node.key[n_pages * ps :], node.pages[n_pages:], upper
        upper.children[self._first(node.key, 0)] = node
        return upper

    def insert(self, tokens: list[int], pages: list[int], namespace: str | None = None) -> tuple[list[int], TreeNode]:
        """Cache ``pages`` for the page-aligned ``tokens``.

        Returns the tree's pages for the whole key (already-cached positions
        keep the tree's pages: the caller frees its duplicates) and the last node.
        """
        ps = self.page_size
        assert len(tokens) == len(pages) * ps, "insert takes whole pages"
        cached, node = self.match_prefix(tokens, namespace)
        i = len(cached)
        if i < len(pages):
            leaf = TreeNode(node, tuple(tokens[i * ps :]), list(pages[i:]))
            node.children[self._first(leaf.key, 0)] = leaf
            self.cached_pages += len(pages) - i
            node = leaf
        return cached + list(pages[i:]), node

    def inc_lock_ref(self, node: TreeNode) -> None:
        while node is not None:
            node.lock_ref += 1
            node = node.parent  # type: ignore[assignment]

    def dec_lock_ref(self, node: TreeNode) -> None:
        while node is not None:
            node.lock_ref -= 1
            assert node.lock_ref >= 0, "unbalanced radix-cache lock"
            node = node.parent  # type: ignore[assignment]

    def evictable_pages(self) -> int:
        return sum(len(n.pages) for n in self._nodes() if n.lock_ref == 0)

    def _nodes(self) -> list[TreeNode]:
        out, stack = [], [self.root, *self.ns_roots.values()]
        while stack:
            n = stack.pop()
            out.append(n)
            stack.extend(n.children.values())
        return out

    def evict(self, num_pages: int) -> int:
        """Free at least ``num_pages`` pages from unlocked leaves, LRU first; returns pages freed."""
        heap = [n for n in self._nodes() if not n.children and n.lock_ref == 0 and n.key]  # roots have no key
        heapq.heapify(heap)
        freed = 0
        while heap and freed < num_pages:
            leaf = heapq.heappop(heap)
            self.allocator.free(leaf.pages)
            freed += len(leaf.pages)
            self.cached_pages -= len(leaf.pages)
            parent = leaf.parent
            assert parent is not None
            del parent.children[self._first(leaf.key, 0)]
            if parent.key and not parent.children and parent.lock_ref == 0:
                heapq.heappush(heap, parent)
        return freed

    def reset(self) -> None:
        """Drop every unlocked entry (``/flush_cache``)."""
        self.evict(self.cached_pages)
