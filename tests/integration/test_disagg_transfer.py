"""Mooncake's transfer engine (TCP, peer-to-peer handshake) moves KV pages between two registered pools on
127.0.0.1, through this project's wrapper: what a prefill server does to a decode server's pool."""

from __future__ import annotations

import pytest
import torch

from sglang.srt.disaggregation.base import KVLayout, KVTransferError, page_runs
from sglang.srt.disaggregation.transfer import MooncakeTransfer
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool


def test_pages_move_between_two_pools_over_tcp():
    src_pool = MHATokenToKVPool(64, 4, torch.float32, 2, 8, 3, "cpu")
    dst_pool = MHATokenToKVPool(64, 4, torch.float32, 2, 8, 3, "cpu")
    for i, b in enumerate([*src_pool.k_buffer, *src_pool.v_buffer]):
        b.copy_(torch.randn_like(b) + i)
    src, dst = MooncakeTransfer("127.0.0.1", None, True), MooncakeTransfer("127.0.0.1", None, True)
    a, b = KVLayout.of_pool(src_pool), KVLayout.of_pool(dst_pool)
    for t, lay in ((src, a), (dst, b)):
        for ptr, n in lay.buffers(16):
            t.register(ptr, n)
    src_pages, dst_pages = [2, 3, 4, 9], [10, 11, 5, 6]
    srcs, dsts, lens = [], [], []
    for s, d, n in page_runs(src_pages, dst_pages):
        for sp, dp, w in zip(a.ptrs, b.ptrs, a.page_bytes):
            srcs.append(sp + s * w)
            dsts.append(dp + d * w)
            lens.append(n * w)
    src.write(dst.session, srcs, dsts, lens)
    for sb, db in zip([*src_pool.k_buffer, *src_pool.v_buffer], [*dst_pool.k_buffer, *dst_pool.v_buffer]):
        for s, d in zip(src_pages, dst_pages):
            assert torch.equal(db[d * 4 : d * 4 + 4], sb[s * 4 : s * 4 + 4])
    untouched = [p for p in range(16) if p not in dst_pages]
    assert all(float(db[p * 4 : p * 4 + 4].abs().sum()) == 0 for db in dst_pool.k_buffer for p in untouched)
    with pytest.raises(KVTransferError, match="unreachable or gone"):
        src.write("127.0.0.1:1", srcs[:1], dsts[:1], lens[:1])


def test_a_fragmented_prompt_of_many_slices_arrives_whole():
    """Pages in opposite orders on the two sides make one slice per page and buffer (24,000 here): more than
    Mooncake's TCP lane takes in one batch, so the wrapper writes them in batches."""
    src_pool = MHATokenToKVPool(4096, 1, torch.float32, 1, 16, 6, "cpu")
    dst_pool = MHATokenToKVPool(4096, 1, torch.float32, 1, 16, 6, "cpu")
    for b in [*src_pool.k_buffer, *src_pool.v_buffer]:
        b.copy_(torch.randn_like(b))
    src, dst = MooncakeTransfer("127.0.0.1", None, True), MooncakeTransfer("127.0.0.1", None, True)
    a, b = KVLayout.of_pool(src_pool), KVLayout.of_pool(dst_pool)
    for t, lay in ((src, a), (dst, b)):
        for ptr, n in lay.buffers(4096):
            t.register(ptr, n)
    src_pages, dst_pages = list(range(2999, 999, -1)), list(range(2000))
    srcs, dsts, lens = [], [], []
    for s, d, n in page_runs(src_pages, dst_pages):
        for sp, dp, w in zip(a.ptrs, b.ptrs, a.page_bytes):
            srcs.append(sp + s * w)
            dsts.append(dp + d * w)
            lens.append(n * w)
    assert len(srcs) == 24000
    src.write(dst.session, srcs, dsts, lens)
    for sb, db in zip([*src_pool.k_buffer, *src_pool.v_buffer], [*dst_pool.k_buffer, *dst_pool.v_buffer]):
        assert torch.equal(db[:2000], sb[torch.tensor(src_pages)])
