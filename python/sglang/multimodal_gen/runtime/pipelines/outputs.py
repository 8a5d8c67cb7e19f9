"""``DiffusionOutput``: one generated image with what produced it."""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass
class DiffusionOutput:
    """``image`` is float32 (H, W) in [0, 1] at the model's native resolution."""

    prompt: str
    label: int | None
    seed: int
    image: np.ndarray
    num_inference_steps: int
    guidance_scale: float
    size: int | None = None
    path: str | None = None

    def to_uint8(self, size: int | None = None) -> np.ndarray:
        px = np.clip(np.rint(self.image * 255.0), 0, 255).astype(np.uint8)
        size = size or self.size
        if size and size != px.shape[0]:
            k = size // px.shape[0]
            px = px.repeat(k, axis=0).repeat(k, axis=1)
        return px

    def to_png(self, size: int | None = None) -> bytes:
        """8-bit grayscale PNG bytes, encoded by Pillow (as upstream's diffusion runtime does)."""
        from PIL import Image

        buf = io.BytesIO()
        Image.fromarray(self.to_uint8(size)).save(buf, format="PNG")  # (H, W) uint8 is mode "L"
        return buf.getvalue()

    def to_b64_png(self, size: int | None = None) -> str:
        return base64.b64encode(self.to_png(size)).decode("ascii")

    def save(self, path: str | Path, size: int | None = None) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(self.to_png(size))
        return path
