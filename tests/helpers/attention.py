"""A plugin-style attention backend: the built-in computation under another class."""

from __future__ import annotations

from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend


class RenamedNativeBackend(TorchNativeAttnBackend):
    """Stands for any out-of-tree backend: the fused decode plan must not bypass it."""
