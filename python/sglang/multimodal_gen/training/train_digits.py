"""Train the shipped class-conditional DiT on scikit-learn's 8x8 digits.

    python -m sglang.multimodal_gen.training.train_digits --out DIR [--steps N] [--threads 2]

Reproducible: fixed seed, deterministic data order, ``torch.set_num_threads``.
Writes ``model.safetensors`` and ``pipeline_config.json`` into ``DIR``. Needs
scikit-learn (``pip install -e '.[test]'``) for the data set only.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from sglang.multimodal_gen.runtime.models.digits_dit import DigitsDiT
from sglang.multimodal_gen.runtime.pipelines.noise_schedule import cosine_alphas_cumprod
from sglang.multimodal_gen.runtime.pipelines.pipeline_config import PipelineConfig


def load_digits_tensor() -> tuple[torch.Tensor, torch.Tensor]:
    """Images scaled to [-1, 1] as (N, 1, 8, 8) float32, and labels (N,)."""
    try:
        from sklearn.datasets import load_digits
    except ImportError as exc:
        raise SystemExit("training needs scikit-learn for the digits data set: pip install scikit-learn") from exc
    data = load_digits()
    x = torch.tensor(data.images, dtype=torch.float32)[:, None] / 8.0 - 1.0
    return x, torch.tensor(data.target, dtype=torch.long)


def train(out: Path, steps: int, batch_size: int, lr: float, seed: int, threads: int, p_uncond: float) -> dict[str, float]:
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    cfg = PipelineConfig()
    model = DigitsDiT(cfg.dit)
    model.init_weights()
    n_params = sum(p.numel() for p in model.parameters())
    x_all, y_all = load_digits_tensor()
    abar = cosine_alphas_cumprod(cfg.num_train_timesteps).float()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    ema = {k: v.detach().clone() for k, v in model.state_dict().items()}
    gen = torch.Generator().manual_seed(seed)
    t0, losses = time.time(), []
    for step in range(steps):
        idx = torch.randint(0, x_all.shape[0], (batch_size,), generator=gen)
        x0, y = x_all[idx], y_all[idx].clone()
        y[torch.rand(batch_size, generator=gen) < p_uncond] = cfg.dit.num_classes
        t = torch.randint(0, cfg.num_train_timesteps, (batch_size,), generator=gen)
        noise = torch.randn(x0.shape, generator=gen)
        a = abar[t].view(-1, 1, 1, 1)
        xt = a.sqrt() * x0 + (1 - a).sqrt() * noise
        for g in opt.param_groups:  # warm-up then cosine decay
            g["lr"] = lr * min(1.0, (step + 1) / 200) * 0.5 * (1 + math.cos(math.pi * step / steps))
        loss = F.mse_loss(model(xt, t, y), noise)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        with torch.no_grad():
            decay = min(0.999, (1 + step) / (10 + step))
            for k, v in model.state_dict().items():
                ema[k].mul_(decay).add_(v.detach(), alpha=1 - decay)
        losses.append(loss.item())
        if (step + 1) % 250 == 0:
            print(f"step {step + 1}/{steps} loss {sum(losses[-250:]) / 250:.4f} {time.time() - t0:.0f}s", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in ema.items()}, str(out / "model.safetensors"), metadata={"arch": DigitsDiT.arch})
    (out / "pipeline_config.json").write_text(json.dumps(cfg.to_dict(), indent=2) + "\n")
    stats = {"params": n_params, "seconds": time.time() - t0, "final_loss": sum(losses[-250:]) / min(250, len(losses))}
    print(json.dumps(stats))
    return stats


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--steps", type=int, default=6000)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--p-uncond", type=float, default=0.15)
    a = p.parse_args(argv)
    train(a.out, a.steps, a.batch_size, a.lr, a.seed, a.threads, a.p_uncond)


if __name__ == "__main__":
    main()
