"""Cosine noise schedule and the deterministic DDIM update (eta = 0)."""

from __future__ import annotations

import math

import torch


def cosine_alphas_cumprod(num_steps: int, s: float = 0.008) -> torch.Tensor:
    """alpha_bar(t) for t = 0..num_steps-1 (Nichol & Dhariwal), float64, clipped away from 0."""
    t = torch.arange(num_steps + 1, dtype=torch.float64) / num_steps
    f = torch.cos((t + s) / (1 + s) * math.pi / 2) ** 2
    betas = (1 - f[1:] / f[:-1]).clamp(max=0.999)
    return torch.cumprod(1 - betas, dim=0)


def ddim_timesteps(num_train_steps: int, num_inference_steps: int) -> list[int]:
    """Evenly spaced training timesteps, from the noisiest to 0."""
    if num_inference_steps < 1 or num_inference_steps > num_train_steps:
        raise ValueError(f"num_inference_steps must be between 1 and {num_train_steps}, got {num_inference_steps}")
    steps = torch.linspace(num_train_steps - 1, 0, num_inference_steps).round().long().tolist()
    return sorted(set(steps), reverse=True)


def ddim_step(x: torch.Tensor, eps: torch.Tensor, a_t: float, a_prev: float) -> tuple[torch.Tensor, torch.Tensor]:
    """One DDIM step: returns (x_prev, predicted x0 clipped to [-1, 1])."""
    x0 = ((x - math.sqrt(1 - a_t) * eps) / math.sqrt(a_t)).clamp(-1, 1)
    eps = (x - math.sqrt(a_t) * x0) / math.sqrt(1 - a_t)
    return math.sqrt(a_prev) * x0 + math.sqrt(1 - a_prev) * eps, x0
