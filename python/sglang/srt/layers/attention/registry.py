"""The attention-backend axis: a base class and a lazily importing registry.

Out-of-tree platforms register their backend in ``init_backend()`` and name it
in ``get_default_attention_backend()``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import torch

from sglang.plugin_core.discovery import import_qualname

ATTENTION_BACKENDS: dict[str, str] = {
    "torch_native": "sglang.srt.layers.attention.torch_native_backend:TorchNativeAttnBackend",
}


class AttentionBackend(ABC):
    """Computes attention over the paged KV pool of a model runner."""

    def __init__(self, runner: Any) -> None:
        self.runner = runner

    @abstractmethod
    def init_forward_metadata(self, fb: Any) -> None:
        """Build per-forward metadata shared by every layer (``fb.attn``)."""

    @abstractmethod
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int, fb: Any) -> torch.Tensor:
        """Store the new ``k``/``v`` in the pool, return attention output ``[T, H*D]``."""


def register_attention_backend(name: str, qualname: str) -> None:
    if name in ATTENTION_BACKENDS and ATTENTION_BACKENDS[name] != qualname:
        raise ValueError(f"attention backend {name!r} is already registered as {ATTENTION_BACKENDS[name]}")
    ATTENTION_BACKENDS[name] = qualname


def create_attention_backend(name: str, runner: Any) -> AttentionBackend:
    qualname = ATTENTION_BACKENDS.get(name)
    if qualname is None:
        raise ValueError(f"unknown attention backend {name!r}; supported: {sorted(ATTENTION_BACKENDS)} (--attention-backend)")
    cls = import_qualname(qualname)
    return cls(runner)
