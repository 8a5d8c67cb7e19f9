"""Attention backends: one base class and a registry that imports lazily."""

from sglang.srt.layers.attention.registry import (
    ATTENTION_BACKENDS,
    AttentionBackend,
    create_attention_backend,
    register_attention_backend,
)

__all__ = ["ATTENTION_BACKENDS", "AttentionBackend", "create_attention_backend", "register_attention_backend"]
