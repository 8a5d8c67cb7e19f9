"""A small class-conditional diffusion transformer (DiT) for 8x8 digit images.

Patches of ``patch_size`` pixels become tokens; the timestep and the class
(``num_classes`` is the "no class" token used for classifier-free guidance)
condition every block through adaptive RMSNorm with zero-initialised gates.
Norms, activations and attention are ``CustomOp``s, so a platform plugin can
swap their implementation.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from sglang.multimodal_gen.runtime.layers.activation import GELU, SiLU
from sglang.multimodal_gen.runtime.layers.attention.backends import AttentionBackendEnum
from sglang.multimodal_gen.runtime.layers.attention.layer import USPAttention
from sglang.multimodal_gen.runtime.layers.layernorm import RMSNorm
from sglang.multimodal_gen.runtime.layers.torch_ops import timestep_embedding


@dataclass(frozen=True)
class DiTConfig:
    image_size: int = 8
    channels: int = 1
    patch_size: int = 2
    hidden_size: int = 96
    depth: int = 4
    num_heads: int = 4
    mlp_ratio: int = 4
    num_classes: int = 10

    @property
    def num_tokens(self) -> int:
        return (self.image_size // self.patch_size) ** 2

    @property
    def patch_dim(self) -> int:
        return self.channels * self.patch_size**2


def _modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return x * (1 + scale[:, None]) + shift[:, None]


class DiTBlock(nn.Module):
    def __init__(self, cfg: DiTConfig, backend: AttentionBackendEnum | None) -> None:
        super().__init__()
        d, h = cfg.hidden_size, cfg.num_heads
        self.num_heads, self.head_size = h, d // h
        self.norm1 = RMSNorm(d, elementwise_affine=False)
        self.qkv = nn.Linear(d, 3 * d)
        self.attn = USPAttention(h, d // h, backend=backend)
        self.proj = nn.Linear(d, d)
        self.norm2 = RMSNorm(d, elementwise_affine=False)
        self.fc1 = nn.Linear(d, cfg.mlp_ratio * d)
        self.act = GELU()
        self.fc2 = nn.Linear(cfg.mlp_ratio * d, d)
        self.ada = nn.Sequential(SiLU(), nn.Linear(d, 6 * d))

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        # x: (B, L, D); c: (B, D)
        b, n, d = x.shape
        sh1, sc1, g1, sh2, sc2, g2 = self.ada(c).chunk(6, dim=-1)
        q, k, v = self.qkv(_modulate(self.norm1(x), sh1, sc1)).view(b, n, 3, self.num_heads, self.head_size).unbind(2)
        x = x + g1[:, None] * self.proj(self.attn(q, k, v).reshape(b, n, d))
        return x + g2[:, None] * self.fc2(self.act(self.fc1(_modulate(self.norm2(x), sh2, sc2))))


class DigitsDiT(nn.Module):
    """eps-prediction network: (x (B,C,H,W), t (B,), y (B,)) -> eps (B,C,H,W)."""

    arch = "DigitsDiT"

    def __init__(self, cfg: DiTConfig, attn_backend: AttentionBackendEnum | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        d = cfg.hidden_size
        self.patch_in = nn.Linear(cfg.patch_dim, d)
        self.pos = nn.Parameter(torch.zeros(1, cfg.num_tokens, d))
        self.t_mlp = nn.Sequential(nn.Linear(d, d), SiLU(), nn.Linear(d, d))
        self.y_emb = nn.Embedding(cfg.num_classes + 1, d)
        self.blocks = nn.ModuleList(DiTBlock(cfg, attn_backend) for _ in range(cfg.depth))
        self.norm_out = RMSNorm(d, elementwise_affine=False)
        self.ada_out = nn.Sequential(SiLU(), nn.Linear(d, 2 * d))
        self.patch_out = nn.Linear(d, cfg.patch_dim)

    def init_weights(self) -> None:
        """Training-time initialisation: zero gates and output, so each block starts as identity."""
        nn.init.normal_(self.pos, std=0.02)
        for blk in self.blocks:
            nn.init.zeros_(blk.ada[1].weight)
            nn.init.zeros_(blk.ada[1].bias)
        nn.init.zeros_(self.ada_out[1].weight)
        nn.init.zeros_(self.ada_out[1].bias)
        nn.init.zeros_(self.patch_out.weight)
        nn.init.zeros_(self.patch_out.bias)

    def _patchify(self, x: torch.Tensor) -> torch.Tensor:
        b, c, hgt, w = x.shape
        p = self.cfg.patch_size
        x = x.view(b, c, hgt // p, p, w // p, p).permute(0, 2, 4, 1, 3, 5)
        return x.reshape(b, (hgt // p) * (w // p), c * p * p)

    def _unpatchify(self, x: torch.Tensor) -> torch.Tensor:
        cfg, b = self.cfg, x.shape[0]
        p, g = cfg.patch_size, cfg.image_size // cfg.patch_size
        x = x.view(b, g, g, cfg.channels, p, p).permute(0, 3, 1, 4, 2, 5)
        return x.reshape(b, cfg.channels, cfg.image_size, cfg.image_size)

    def forward(self, x: torch.Tensor, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        from sglang.multimodal_gen.runtime.distributed.communication import sequence_gather, sequence_shard

        # with sequence parallelism each rank runs the blocks on its slice of the tokens
        h = sequence_shard(self.patch_in(self._patchify(x)) + self.pos)
        c = self.t_mlp(timestep_embedding(t, self.cfg.hidden_size).to(h.dtype)) + self.y_emb(y)
        for blk in self.blocks:
            h = blk(h, c)
        shift, scale = self.ada_out(c).chunk(2, dim=-1)
        return self._unpatchify(sequence_gather(self.patch_out(_modulate(self.norm_out(h), shift, scale))))


class PixelDecoder(nn.Module):
    """The pipeline's decoder (the "VAE" stage): model space [-1, 1] -> pixels in [0, 1]."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ((x + 1) * 0.5).clamp(0, 1)
