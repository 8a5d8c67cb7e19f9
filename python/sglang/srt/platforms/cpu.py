"""The built-in CPU platform: complete, and the one the engine uses without an accelerator."""

from __future__ import annotations

import os
import resource
import uuid
from typing import TYPE_CHECKING, Any

from sglang.host import cpu_model_name, meminfo
from sglang.srt.platforms._torch_common import TorchSRTPlatform
from sglang.srt.platforms.device_mixin import DeviceCapability, PlatformEnum
from sglang.srt.platforms.interface import PlatformCapabilities

if TYPE_CHECKING:
    from sglang.srt.server_args import ServerArgs


class CpuSRTPlatform(TorchSRTPlatform):
    capabilities = PlatformCapabilities(supports_torch_compile=True)  # host memory needs no pinning
    _enum = PlatformEnum.CPU
    device_name = "cpu"
    device_type = "cpu"

    def get_device(self, local_rank: int) -> Any:
        import torch

        return torch.device("cpu")

    def set_device(self, device: Any) -> None:
        pass  # one host, nothing to select

    def get_device_name(self, device_id: int = 0) -> str:
        return cpu_model_name()

    def get_device_uuid(self, device_id: int = 0) -> str:
        try:
            with open("/etc/machine-id") as f:
                return f"cpu-{f.read().strip()}"
        except OSError:
            return f"cpu-{uuid.getnode():012x}"

    def get_device_capability(self, device_id: int = 0) -> DeviceCapability | None:
        return None

    def get_device_total_memory(self, device_id: int = 0) -> int:
        total = meminfo("MemTotal")
        return total if total is not None else os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")

    def get_available_memory(self, device_id: int = 0) -> tuple[int, int]:
        free = meminfo("MemAvailable")
        if free is None:
            free = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
        return free, self.get_device_total_memory(device_id)

    def get_current_memory_usage(self, device: Any = None) -> float:
        # ru_maxrss is KiB on Linux: the process's peak resident set
        return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)

    def get_torch_distributed_backend_str(self) -> str:
        return "gloo"

    def apply_server_args_defaults(self, server_args: ServerArgs) -> dict[str, Any]:
        return {"disable_cuda_graph": True}  # no device graphs on a CPU: capture is never attempted
