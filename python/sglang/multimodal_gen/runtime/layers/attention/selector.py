"""Attention backend selection: the user's enum name, else the platform's choice."""

from __future__ import annotations

from typing import Any

import torch

from sglang.multimodal_gen.runtime.layers.attention.backends import BACKEND_CLASSES, AttentionBackend, AttentionBackendEnum
from sglang.plugin_core.discovery import import_qualname


def default_backend_cls_str(selected: AttentionBackendEnum | None) -> str:
    """The base platform's answer: the selected backend, else torch SDPA."""
    return BACKEND_CLASSES[selected or AttentionBackendEnum.TORCH_SDPA]


def get_attn_backend(selected: AttentionBackendEnum | None, num_heads: int, head_size: int, dtype: torch.dtype) -> AttentionBackend:
    """Ask ``current_platform.get_attn_backend_cls_str()`` and build the class it names."""
    from sglang.multimodal_gen.runtime.platforms import current_platform

    qualname = current_platform.get_attn_backend_cls_str(selected, head_size, dtype)
    try:
        cls: Any = import_qualname(qualname)
    except Exception as exc:
        raise ValueError(f"attention backend {qualname!r} named by {current_platform!r} does not import: {exc}") from exc
    if not (isinstance(cls, type) and issubclass(cls, AttentionBackend)):
        raise TypeError(f"attention backend {qualname!r} named by {current_platform!r} is not an AttentionBackend subclass")
    return cls(num_heads, head_size, dtype)
