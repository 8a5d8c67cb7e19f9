"""RMSNorm, SiLU-and-mul and rotary embedding (rotate-half convention)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, hidden: int, eps: float, dtype: torch.dtype) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden, dtype=dtype), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # computed in float32 like the reference models, cast back
        return F.rms_norm(x.float(), (x.shape[-1],), self.weight.float(), self.eps).to(x.dtype)


def silu_and_mul(gate_up: torch.Tensor) -> torch.Tensor:
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


class RotaryEmbedding(nn.Module):
    """cos/sin for every position up to ``max_pos``, applied per token position."""

    def __init__(self, head_dim: int, max_pos: int, theta: float, dtype: torch.dtype) -> None:
        super().__init__()
        inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
        freqs = torch.outer(torch.arange(max_pos, dtype=torch.float64), inv)
        emb = torch.cat([freqs, freqs], dim=-1)
        self.register_buffer("cos", emb.cos().to(dtype), persistent=False)  # [max_pos, head_dim]
        self.register_buffer("sin", emb.sin().to(dtype), persistent=False)
        self.half = head_dim // 2

    def lookup(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin ``[T, 1, D]`` for ``positions`` ``[T]``: gathered once per forward, shared by every layer."""
        return self.cos[positions].unsqueeze(1), self.sin[positions].unsqueeze(1)

    def apply(self, cos_sin: tuple[torch.Tensor, torch.Tensor], q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # q: [T, H, D], k: [T, Hkv, D]
        cos, sin = cos_sin
        return q * cos + self._rotate(q) * sin, k * cos + self._rotate(k) * sin

    def forward(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.apply(self.lookup(positions), q, k)

    def _rotate(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat((-x[..., self.half :], x[..., : self.half]), dim=-1)
