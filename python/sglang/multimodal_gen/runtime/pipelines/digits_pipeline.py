"""The class-conditional denoising pipeline: noise -> DDIM with guidance -> decoder."""

from __future__ import annotations

from typing import Any

import torch

from sglang.multimodal_gen.runtime.pipelines.noise_schedule import cosine_alphas_cumprod, ddim_step, ddim_timesteps
from sglang.multimodal_gen.runtime.pipelines.pipeline_config import PipelineConfig


class DigitsDiffusionPipeline:
    """Holds the transformer and decoder on one device; called by ``GPUWorker`` only.

    Every image's starting noise comes from its own CPU generator seeded with
    its seed, so an image depends on its seed and request only, not on the
    other images of its batch (up to float rounding of batched matmuls).
    """

    def __init__(self, config: PipelineConfig, transformer: Any, vae: Any, device: torch.device, dtype: torch.dtype) -> None:
        self.config, self.transformer, self.vae = config, transformer, vae
        self.device, self.dtype = device, dtype
        self.alphas_cumprod = cosine_alphas_cumprod(config.num_train_timesteps).tolist()

    def initial_noise(self, seeds: list[int]) -> torch.Tensor:
        d = self.config.dit
        shape = (d.channels, d.image_size, d.image_size)
        noise = [torch.randn(shape, generator=torch.Generator("cpu").manual_seed(s)) for s in seeds]
        return torch.stack(noise).to(self.device)

    def __call__(self, labels: list[int | None], seeds: list[int], num_inference_steps: int, guidance_scale: float) -> torch.Tensor:
        """-> (B, H, W) float32 pixels in [0, 1], on the CPU."""
        from sglang.multimodal_gen.runtime.platforms import current_platform

        null = self.config.dit.num_classes
        y = torch.tensor([null if lab is None else lab for lab in labels], device=self.device)
        y_both = torch.cat([y, torch.full_like(y, null)])
        x = self.initial_noise(seeds).to(self.dtype)
        steps = ddim_timesteps(self.config.num_train_timesteps, num_inference_steps)
        x0 = x
        with current_platform.inference_mode():
            for i, t in enumerate(steps):
                a_t = self.alphas_cumprod[t]
                a_prev = self.alphas_cumprod[steps[i + 1]] if i + 1 < len(steps) else 1.0
                tt = torch.full((2 * len(labels),), t, device=self.device, dtype=torch.long)
                eps_c, eps_u = self.transformer(torch.cat([x, x]), tt, y_both).float().chunk(2)
                eps = eps_u + guidance_scale * (eps_c - eps_u)
                x, x0 = ddim_step(x.float(), eps, a_t, a_prev)
                x = x.to(self.dtype)
            pixels = self.vae(x0.float())
        return pixels[:, 0].cpu()
