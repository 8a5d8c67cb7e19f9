"""Shared factories of the built-in platforms: the torch KV pool, allocator, runner."""

from __future__ import annotations

from typing import Any

from sglang.srt.platforms.errors import PlatformError
from sglang.srt.platforms.interface import SRTPlatform


class TorchSRTPlatform(SRTPlatform):
    """Built-in platforms share these subsystem classes; they differ in device ops."""

    def get_default_attention_backend(self) -> str:
        return "torch_native"

    def is_pin_memory_available(self, device: Any = None) -> bool:
        return self.capabilities.supports_pin_memory

    def get_graph_runner_cls(self) -> type:
        from sglang.srt.model_executor.graph_runner import EagerGraphRunner

        return EagerGraphRunner

    def get_mha_kv_pool_cls(self) -> type:
        from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool

        return MHATokenToKVPool

    def get_mla_kv_pool_cls(self) -> type:
        raise NotImplementedError(f"{type(self).__name__}: MLA models are not supported by this build; use a Llama-family model")

    def get_dsa_kv_pool_cls(self) -> type:
        raise NotImplementedError(f"{type(self).__name__}: DSA (DeepSeek V3.2) models are not supported by this build")

    def get_paged_allocator_cls(self) -> type:
        from sglang.srt.mem_cache.allocator import PagedTokenToKVPoolAllocator

        return PagedTokenToKVPoolAllocator

    def get_quantization_config(self, quantization: str | None) -> Any:
        if not quantization:
            return None
        if quantization == "gguf_q4" and self.is_cpu():
            from sglang.srt.layers.q4_packed import PackedQ4Config

            return PackedQ4Config()
        supported = "gguf_q4" if self.is_cpu() else "none"
        raise PlatformError(
            f"{type(self).__name__} does not support --quantization {quantization!r} (supported: {supported}); "
            "drop the flag to run dequantized weights"
        )

    def get_piecewise_backend_cls(self) -> type:
        raise NotImplementedError(f"{type(self).__name__} has no piecewise graph backend (support_piecewise_cuda_graph() is False)")
