"""Built-in CUDA, ROCm platforms: device operations through ``torch.cuda``."""

from __future__ import annotations

from typing import Any

from sglang.srt.platforms._torch_common import TorchSRTPlatform
from sglang.srt.platforms.device_mixin import DeviceCapability, PlatformEnum
from sglang.srt.platforms.interface import PlatformCapabilities


class CudaSRTPlatform(TorchSRTPlatform):
    # no CUDA graph runner in this engine yet: capture stays off
    capabilities = PlatformCapabilities(supports_triton=True, supports_torch_compile=True, supports_fp8=True, supports_pin_memory=True)
    _enum = PlatformEnum.CUDA
    device_name = "cuda"
    device_type = "cuda"

    def get_device(self, local_rank: int) -> Any:
        import torch

        return torch.device("cuda", local_rank)

    def set_device(self, device: Any) -> None:
        import torch

        torch.cuda.set_device(device)

    def get_device_name(self, device_id: int = 0) -> str:
        import torch

        return torch.cuda.get_device_name(device_id)

    def get_device_uuid(self, device_id: int = 0) -> str:
        import torch

        return str(torch.cuda.get_device_properties(device_id).uuid)

    def get_device_capability(self, device_id: int = 0) -> DeviceCapability | None:
        import torch

        major, minor = torch.cuda.get_device_capability(device_id)
        return DeviceCapability(major, minor)

    def empty_cache(self) -> None:
        import torch

        torch.cuda.empty_cache()

    def synchronize(self) -> None:
        import torch

        torch.cuda.synchronize()

    def get_device_total_memory(self, device_id: int = 0) -> int:
        import torch

        return int(torch.cuda.get_device_properties(device_id).total_memory)

    def get_available_memory(self, device_id: int = 0) -> tuple[int, int]:
        import torch

        free, total = torch.cuda.mem_get_info(device_id)
        return int(free), int(total)

    def get_current_memory_usage(self, device: Any = None) -> float:
        import torch

        return float(torch.cuda.max_memory_allocated(device))

    def get_torch_distributed_backend_str(self) -> str:
        return "nccl"

    def supports_fp8(self) -> bool:
        cap = self.get_device_capability()
        return cap is not None and cap >= DeviceCapability(8, 9)


class RocmSRTPlatform(CudaSRTPlatform):
    """AMD GPUs: torch exposes HIP through the ``cuda`` device type; RCCL answers to "nccl"."""

    _enum = PlatformEnum.ROCM
    device_name = "rocm"
    device_type = "cuda"

    def supports_fp8(self) -> bool:
        cap = self.get_device_capability()
        return cap is not None and cap >= DeviceCapability(9, 4)
