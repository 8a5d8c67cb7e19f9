"""The emulated ``my_device`` as a diffusion platform (tensors live in host memory)."""

from __future__ import annotations

from typing import Any

from sglang.multimodal_gen.runtime.platforms import Platform, PlatformEnum


class MyDiffusionPlatform(Platform):
    _enum = PlatformEnum.OOT
    device_name = "my_device"
    device_type = "my_device"
    dispatch_key = "PrivateUse1"

    def get_dispatch_key_name(self) -> str:
        return "my_device"

    def init_backend(self) -> None:
        from my_platform_plugin.ops import rms_norm_forward
        from sglang.multimodal_gen.runtime.layers.custom_op import CustomOp
        from sglang.multimodal_gen.runtime.layers.layernorm import RMSNorm

        CustomOp.register_oot_forward(RMSNorm, fn=rms_norm_forward, platform_key="my_device")

    def get_device(self, local_rank: int) -> Any:
        import torch

        return torch.device("cpu")  # emulated: the device's memory is host memory

    def get_local_torch_device(self) -> Any:
        import torch

        return torch.device("cpu")

    def get_device_name(self, device_id: int = 0) -> str:
        return f"My Device {device_id} (emulated)"

    def get_device_total_memory(self, device_id: int = 0) -> int:
        return 8 << 30
