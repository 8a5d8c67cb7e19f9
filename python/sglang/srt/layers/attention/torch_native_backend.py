"""``torch_native``: scaled-dot-product attention over the paged KV pool (any device)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from sglang.srt.layers.attention.registry import AttentionBackend
from sglang.srt.model_executor.forward_batch_info import ForwardMode


class TorchNativeAttnBackend(AttentionBackend):
    def init_forward_metadata(self, fb: Any) -> None:
        if fb.mode is ForwardMode.DECODE:
            # the runner's padded [B, Lmax] slot index; mask [B, 1, 1, Lmax] hides the padding
            mask = torch.arange(fb.kv_index.shape[1]).unsqueeze(0) < fb.kv_lens.unsqueeze(1)
            fb.attn = (fb.kv_index, mask[:, None, None, :])
        else:
            metas = []
            start = 0
            for prefix, n, slots in zip(fb.prefix_lens, fb.extend_lens, fb.kv_slots):
                mask = None
                if prefix:  # query i sees keys [0, prefix + i]
                    mask = torch.arange(prefix + n).unsqueeze(0) <= (torch.arange(n) + prefix).unsqueeze(1)
                metas.append((start, n, slots, mask))
                start += n
            fb.attn = metas

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int, fb: Any) -> torch.Tensor:
        # q: [T, H, D]; k, v: [T, Hkv, D]
        pool = self.runner.kv_pool
        pool.set_kv_buffer(layer_id, fb.out_cache_loc, k, v)
        kb, vb = pool.get_key_buffer(layer_id), pool.get_value_buffer(layer_id)
        if fb.mode is ForwardMode.DECODE:
            idx, mask = fb.attn
            kk = kb[idx].transpose(1, 2)  # [B, Hkv, L, D]
            vv = vb[idx].transpose(1, 2)
            out = F.scaled_dot_product_attention(q.unsqueeze(2), kk, vv, attn_mask=mask, enable_gqa=True)
            return out.reshape(q.shape[0], -1)
        outs = []
        for start, n, slots, mask in fb.attn:
            qi = q[start : start + n].transpose(0, 1)  # [H, n, D]
            ki, vi = kb[slots].transpose(0, 1), vb[slots].transpose(0, 1)  # [Hkv, L, D]
            o = F.scaled_dot_product_attention(qi, ki, vi, attn_mask=mask, is_causal=mask is None, enable_gqa=True)
            outs.append(o.transpose(0, 1).reshape(n, -1))
        return torch.cat(outs, 0)
