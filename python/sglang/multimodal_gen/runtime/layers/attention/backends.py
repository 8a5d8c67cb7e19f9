"""Attention backends: one base class, named by ``AttentionBackendEnum``.

Shapes: q, k, v and the output are (batch, heads, tokens, head_size).
"""

from __future__ import annotations

import enum
import math

import torch
import torch.nn.functional as F


class AttentionBackendEnum(enum.Enum):
    """Names the ``--attention-backend`` flag accepts (and only these)."""

    TORCH_SDPA = "torch_sdpa"
    NAIVE = "naive"

    @classmethod
    def parse(cls, name: str) -> AttentionBackendEnum:
        key = name.strip().upper()
        if key in cls.__members__:
            return cls[key]
        for member in cls:
            if member.value == name.strip().lower():
                return member
        raise ValueError(
            f"unknown attention backend {name!r} (--attention-backend); supported: "
            f"{', '.join(m.name for m in cls)}. A custom backend is chosen by the platform's "
            "get_attn_backend_cls_str() when no backend is named."
        )


class AttentionBackend:
    """Base of attention backends; constructed once per attention layer."""

    name = "base"

    def __init__(self, num_heads: int, head_size: int, dtype: torch.dtype) -> None:
        self.num_heads, self.head_size, self.dtype = num_heads, head_size, dtype

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class TorchSDPABackend(AttentionBackend):
    name = "torch_sdpa"

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v)


class NaiveAttentionBackend(AttentionBackend):
    """Explicit softmax(QK^T / sqrt(d)) V in float32; the reference for the others."""

    name = "naive"

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        scores = torch.matmul(q.float(), k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
        return torch.matmul(scores.softmax(-1), v.float()).to(q.dtype)


BACKEND_CLASSES: dict[AttentionBackendEnum, str] = {
    AttentionBackendEnum.TORCH_SDPA: f"{__name__}.TorchSDPABackend",
    AttentionBackendEnum.NAIVE: f"{__name__}.NaiveAttentionBackend",
}
