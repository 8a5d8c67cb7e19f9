"""The attention ``CustomOp`` the models use (Ulysses-style over the sequence group)."""

from __future__ import annotations

import torch

from sglang.multimodal_gen.runtime.layers.attention.backends import AttentionBackendEnum
from sglang.multimodal_gen.runtime.layers.attention.selector import get_attn_backend
from sglang.multimodal_gen.runtime.layers.custom_op import CustomOp


class USPAttention(CustomOp):
    """Multi-head attention over (batch, tokens, heads, head_size) inputs.

    With a sequence-parallel group of size > 1 each rank holds a slice of the
    tokens: ``all_to_all_4D`` trades it for a slice of the heads before the
    backend runs, and back after.
    """

    def __init__(self, num_heads: int, head_size: int, dtype: torch.dtype = torch.float32, backend: AttentionBackendEnum | None = None) -> None:
        super().__init__()
        self.num_heads, self.head_size = num_heads, head_size
        self.backend = get_attn_backend(backend, num_heads, head_size, dtype)

    def forward_native(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        from sglang.multimodal_gen.runtime.distributed.communication import all_to_all_4D, sp_world_size

        if sp_world_size() > 1:  # (B, L/sp, H, D) -> (B, L, H/sp, D)
            q, k, v = (all_to_all_4D(t, scatter_dim=2, gather_dim=1) for t in (q, k, v))
        out = self.backend.forward(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2)
        if sp_world_size() > 1:
            out = all_to_all_4D(out, scatter_dim=1, gather_dim=2)
        return out.contiguous()

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, backend={self.backend.name}"
