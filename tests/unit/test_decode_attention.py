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
