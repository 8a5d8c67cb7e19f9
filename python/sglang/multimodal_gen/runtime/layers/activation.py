"""Activation ops of the diffusion runtime (``CustomOp``s)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from sglang.multimodal_gen.runtime.layers.custom_op import CustomOp


class SiLU(CustomOp):
    def forward_native(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(x)


class GELU(CustomOp):
    """GELU with the tanh approximation."""

    def forward_native(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x, approximate="tanh")
