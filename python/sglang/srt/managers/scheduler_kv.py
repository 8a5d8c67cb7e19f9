"""The scheduler's KV pages: allocation with eviction, prefix matching and caching in the radix tree.

A mixin of ``Scheduler``, which provides ``allocator``, ``tree`` (``None`` with ``--disable-radix-cache``)
and ``page_size``. Requests hold page ids only; the model runner owns the KV tensors.
"""

from __future__ import annotations

from typing import Any

from sglang.srt.managers.schedule_batch import Req

# A request short of pages takes this many tokens' worth at once where they continue its run of slots and the
# pool stays at least RUN_AHEAD_FREE free after: decode attention reads a run at bandwidth, scattered slots at
# DRAM latency (decode_attention.h). The pages ahead are the request's: freed with it, or by a rollback.
RUN_AHEAD_TOKENS = 16
RUN_AHEAD_FREE = 0.25


class KVPages:
    allocator: Any
    tree: Any
    page_size: int
    spec: Any  # the speculator, or None

    def _alloc(self, n: int, after: int | None = None, ahead: int = 0) -> list[int] | None:
        pages = self.allocator.alloc_run(n, after, ahead)
        if pages is None and self.tree is not None:
            self.tree.evict(n - self.allocator.available_pages())
            pages = self.allocator.alloc_run(n, after, 0)
        return pages

    def _ensure_pages(self, req: Req, tokens: int) -> bool:
        need = -(-tokens // self.page_size) - len(req.pages)
        if need <= 0:
            return True
        ahead = max(0, RUN_AHEAD_TOKENS // self.page_size - need)
        if ahead and self.allocator.available_pages() - need - ahead < RUN_AHEAD_FREE * self.allocator.num_pages:
            ahead = 0
        pages = self._alloc(need, req.pages[-1] if req.pages else None, ahead)
        if pages is None:
            return False
        req.pages.extend(pages)
        return True

    def _match_prefix(self, req: Req) -> None:
        """Lock the longest cached prefix of ``req`` in its adapter's namespace (``lora_id``, minted by the server)."""
        if self.tree is None or req.kv_len or req.last_node is not None:
            return
        pages, node = self.tree.match_prefix(self._matchable(req), req.lora_id)
        self.tree.inc_lock_ref(node)
        req.last_node, req.pages, req.shared_pages = node, list(pages), len(pages)
        req.kv_len = len(pages) * self.page_size
        if not req.output_ids:
            req.cached_tokens = req.kv_len

    @staticmethod
    def _matchable(req: Req) -> list[int]:
        """The leading tokens of ``req`` the prefix cache may serve: all but the last (one token is computed), and
        none from the first prompt log-probability on (those need the logits)."""
        upto = len(req.fill_ids) - 1
        if req.input_lp_from is not None and not req.output_ids:
            upto = min(upto, req.input_lp_from - 1)
        return req.fill_ids[:upto]

    def _cache(self, req: Req) -> None:
        """Move the page-aligned computed prefix into the radix tree; keep it locked for ``req``."""
        assert self.tree is not None
        # a STANDALONE draft's KV pool may lag the target's: the tree takes only what both hold
        n = (req.kv_len if self.spec is None else self.spec.cacheable_len(req)) // self.page_size
        tree_pages, node = self.tree.insert(req.fill_ids[: n * self.page_size], req.pages[:n], req.lora_id)
        self.allocator.free([p for p, t in zip(req.pages[:n], tree_pages) if p != t])
        req.pages[:n] = tree_pages
        self.tree.inc_lock_ref(node)
        if req.last_node is not None:
            self.tree.dec_lock_ref(req.last_node)
        req.last_node, req.shared_pages = node, n

    def _release(self, req: Req, cache: bool) -> None:
        if self.tree is not None and cache and req.kv_len >= self.page_size:
            self._cache(req)
        self.allocator.free(req.pages[req.shared_pages :])
        if req.last_node is not None:
            self.tree.dec_lock_ref(req.last_node)  # type: ignore[union-attr]
        req.pages, req.last_node, req.shared_pages, req.kv_len = [], None, 0, 0
