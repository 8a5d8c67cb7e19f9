"""Normalization ops of the diffusion runtime (``CustomOp``s)."""

from __future__ import annotations

import torch
from torch import nn

from sglang.multimodal_gen.runtime.layers.custom_op import CustomOp


class RMSNorm(CustomOp):
    """Root-mean-square norm over the last dimension; ``weight`` optional.

    x: (..., hidden) -> (..., hidden), same dtype; statistics in float32.
    """

    def __init__(self, hidden_size: int, eps: float = 1e-6, elementwise_affine: bool = True) -> None:
        super().__init__()
        self.hidden_size, self.eps = hidden_size, eps
        self.weight = nn.Parameter(torch.ones(hidden_size)) if elementwise_affine else None

    def forward_native(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        out = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        if self.weight is not None:
            out = out * self.weight.float()
        return out.to(x.dtype)
