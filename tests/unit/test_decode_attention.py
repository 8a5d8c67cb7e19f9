"""Decode attention over the paged pool: both batch-size forms equal a direct computation."""

from __future__ import annotations

import math

import pytest
import torch

from sglang.srt.layers.attention.torch_native_backend import SMALL_DECODE_BATCH, TorchNativeAttnBackend


def reference(q, kb, vb, idx, lens):
    out = []
    for i in range(q.shape[0]):
        slots = idx[i, : lens[i]]
        k, v = kb[slots].float(), vb[slots].float()  # [L, Hkv, D]
        g = q.shape[1] // kb.shape[1]
        k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)  # [L, H, D]
        s = torch.einsum("hd,lhd->hl", q[i].float(), k) / math.sqrt(q.shape[2])
        out.append(torch.einsum("hl,lhd->hd", s.softmax(-1), v).reshape(-1))
    return torch.stack(out)


@pytest.mark.parametrize("batch", [1, SMALL_DECODE_BATCH, SMALL_DECODE_BATCH + 1, 48])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_decode_forms_match_the_direct_computation(batch, dtype):
    g = torch.Generator().manual_seed(batch)
    heads, kv_heads, d, page = 9, 3, 64, 16
    kb = torch.randn(8192, kv_heads, d, generator=g).to(dtype)
    vb = torch.randn(8192, kv_heads, d, generator=g).to(dtype)
    lens = torch.randint(1, 100, (batch,), generator=g)
    width = int(-(-lens.max() // page) * page)
    pages = torch.randperm(8192 // page, generator=g)[: batch * width // page].view(batch, -1)
    idx = (pages[:, :, None] * page + torch.arange(page)).reshape(batch, width)
    pad = (torch.arange(width)[None] >= lens[:, None])[:, None, None, :]
    q = torch.randn(batch, heads, d, generator=g).to(dtype)
    got = TorchNativeAttnBackend._decode(q, kb, vb, idx, pad).float()
    want = reference(q, kb, vb, idx, lens.tolist())
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(got, want, atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_extend_matches_the_direct_causal_computation(dtype):
    """A prefill batch: one request from scratch, one after a cached prefix (the explicit-mask form); each new
    token sees its request's keys up to its own, in whatever slots the allocator gave them."""
    from types import SimpleNamespace

    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

    g = torch.Generator().manual_seed(7)
    heads, kv_heads, d = 9, 3, 64
    pool = MHATokenToKVPool(512, 1, dtype, kv_heads, d, 1, "cpu")
    backend = TorchNativeAttnBackend(SimpleNamespace(kv_pool=pool))
    slots = torch.randperm(511, generator=g)[:100] + 1
    fresh, cached = slots[:40], slots[40:]  # request 0: 40 new tokens; request 1: 35 cached + 25 new
    old_k, old_v = (torch.randn(35, kv_heads, d, generator=g) for _ in range(2))
    pool.set_kv_buffer(0, cached[:35], old_k, old_v)
    q = torch.randn(65, heads, d, generator=g)
    k, v = torch.randn(65, kv_heads, d, generator=g), torch.randn(65, kv_heads, d, generator=g)
    fb = ForwardBatch(ForwardMode.EXTEND, torch.zeros(65, dtype=torch.long), torch.zeros(65, dtype=torch.long),
                      torch.cat([fresh, cached[35:]]), [0, 35], [40, 25], torch.tensor([39, 64]), kv_slots=[fresh, cached])
    backend.init_forward_metadata(fb)
    got = backend.forward(q, k, v, 0, fb)
    want = []
    for rows, keys, vals, prefix in ((slice(0, 40), k[:40], v[:40], 0),
                                     (slice(40, 65), torch.cat([old_k, k[40:]]), torch.cat([old_v, v[40:]]), 35)):
        kk, vv = keys.to(dtype).float().repeat_interleave(3, 1), vals.to(dtype).float().repeat_interleave(3, 1)  # as stored
        s = torch.einsum("thd,lhd->htl", q[rows], kk) / math.sqrt(d)
        n = s.shape[1]
        s = s.masked_fill(torch.arange(kk.shape[0])[None] > (torch.arange(n) + prefix)[:, None], float("-inf"))
        want.append(torch.einsum("htl,lhd->thd", s.softmax(-1), vv).reshape(n, -1))
    torch.testing.assert_close(got, torch.cat(want), atol=1e-4, rtol=1e-4)
