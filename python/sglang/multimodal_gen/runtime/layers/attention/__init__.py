"""Attention for the diffusion runtime: backends, selector and the ``CustomOp`` layer."""

from sglang.multimodal_gen.runtime.layers.attention.backends import AttentionBackend, AttentionBackendEnum

__all__ = ["AttentionBackend", "AttentionBackendEnum"]
