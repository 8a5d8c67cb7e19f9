"""The SRT platform of the emulated device."""

from __future__ import annotations

from my_platform_plugin.device import MyDeviceMixin
from sglang.srt.platforms.interface import PlatformCapabilities, SRTPlatform


class MySRTPlatform(SRTPlatform, MyDeviceMixin):
    # what the device supports; the engine reads these flags (all False by default)
    capabilities = PlatformCapabilities(supports_torch_compile=True)

    def init_backend(self) -> None:
        # Runs once in each worker before the model is built: register the
        # device's attention kernel under its own name.
        from sglang.srt.layers.attention.registry import register_attention_backend

        register_attention_backend("my_device_attn", "sglang.srt.layers.attention.torch_native_backend:TorchNativeAttnBackend")

    def get_default_attention_backend(self) -> str:
        return "my_device_attn"

    def support_cuda_graph(self) -> bool:
        return False

    def get_mha_kv_pool_cls(self) -> type:
        from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool

        return MHATokenToKVPool

    def get_paged_allocator_cls(self) -> type:
        from sglang.srt.mem_cache.allocator import PagedTokenToKVPoolAllocator

        return PagedTokenToKVPoolAllocator

    def get_graph_runner_cls(self) -> type:
        from sglang.srt.model_executor.graph_runner import EagerGraphRunner

        return EagerGraphRunner

    def get_quantization_config(self, quantization: str | None) -> None:
        if quantization:
            raise ValueError(f"my_device supports no quantization, got {quantization!r}")
        return None
