"""Device mixin of the emulated device: identity and device operations."""

from __future__ import annotations

import resource
from typing import Any

from sglang.srt.platforms.device_mixin import DeviceCapability, DeviceMixin, PlatformEnum


class MyDeviceMixin(DeviceMixin):
    _enum = PlatformEnum.OOT
    device_name = "my_device"
    # The torch device type tensors are created on. The emulated device keeps
    # its memory on the host; a real vendor names its PrivateUse1 type here.
    device_type = "cpu"

    def set_device(self, device: Any) -> None:
        pass

    def get_device(self, local_rank: int) -> Any:
        import torch

        return torch.device(self.device_type)

    def get_device_name(self, device_id: int = 0) -> str:
        return f"My Device {device_id} (emulated)"

    def get_device_total_memory(self, device_id: int = 0) -> int:
        return 8 * 2**30  # the emulated card advertises 8 GiB

    def get_available_memory(self, device_id: int = 0) -> tuple[int, int]:
        from sglang.host import available_memory

        total = self.get_device_total_memory(device_id)
        return min(available_memory(), total), total

    def get_current_memory_usage(self, device: Any = None) -> float:
        return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)

    def get_device_capability(self, device_id: int = 0) -> DeviceCapability | None:
        return DeviceCapability(1, 0)

    def get_torch_distributed_backend_str(self) -> str:
        return "gloo"
