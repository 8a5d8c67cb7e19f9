"""Built-in Intel XPU platform: device operations through ``torch.xpu``."""

from __future__ import annotations

from typing import Any

from sglang.srt.platforms._torch_common import TorchSRTPlatform
from sglang.srt.platforms.device_mixin import DeviceCapability, PlatformEnum
from sglang.srt.platforms.interface import PlatformCapabilities


class XpuSRTPlatform(TorchSRTPlatform):
    capabilities = PlatformCapabilities(supports_triton=True, supports_torch_compile=True, supports_pin_memory=True)
    _enum = PlatformEnum.XPU
    device_name = "xpu"
    device_type = "xpu"

    def get_device(self, local_rank: int) -> Any:
        import torch

        return torch.device("xpu", local_rank)

    def set_device(self, device: Any) -> None:
        import torch

        torch.xpu.set_device(device)

    def get_device_name(self, device_id: int = 0) -> str:
        import torch

        return torch.xpu.get_device_name(device_id)

    def get_device_uuid(self, device_id: int = 0) -> str:
        import torch

        return str(getattr(torch.xpu.get_device_properties(device_id), "uuid", f"xpu-{device_id}"))

    def get_device_capability(self, device_id: int = 0) -> DeviceCapability | None:
        return None  # XPU exposes no CUDA-style compute capability

    def empty_cache(self) -> None:
        import torch

        torch.xpu.empty_cache()

    def synchronize(self) -> None:
        import torch

        torch.xpu.synchronize()

    def get_device_total_memory(self, device_id: int = 0) -> int:
        import torch

        return int(torch.xpu.get_device_properties(device_id).total_memory)

    def get_available_memory(self, device_id: int = 0) -> tuple[int, int]:
        import torch

        free, total = torch.xpu.mem_get_info(device_id)
        return int(free), int(total)

    def get_current_memory_usage(self, device: Any = None) -> float:
        import torch

        return float(torch.xpu.max_memory_allocated(device))

    def get_torch_distributed_backend_str(self) -> str:
        return "xccl"
