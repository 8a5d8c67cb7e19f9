"""Built-in diffusion platforms and their detection through torch.

Detection order (the spec's): MPS, XPU, ROCm, CUDA, NPU, MUSA, then CPU.
``SGLANG_DIFFUSION_PLATFORM_OVERRIDE`` may name every built-in but ``xpu``,
which stays automatic only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sglang.multimodal_gen.runtime.platforms.interface import DeviceCapability, Platform, PlatformEnum


class CpuPlatform(Platform):
    _enum = PlatformEnum.CPU
    device_name = "cpu"
    device_type = "cpu"
    dispatch_key = "CPU"

    def get_device(self, local_rank: int) -> Any:
        import torch

        return torch.device("cpu")

    def get_device_name(self, device_id: int = 0) -> str:
        from sglang.host import cpu_model_name

        return cpu_model_name()


class _TorchAccelerator(Platform):
    """Shared code of the accelerators reached through a ``torch.<module>`` API."""

    _module = "cuda"

    def _api(self) -> Any:
        import torch

        return getattr(torch, self._module)

    def set_device(self, device: Any) -> None:
        self._api().set_device(device)

    def get_local_torch_device(self) -> Any:
        import torch

        return torch.device(self.device_type, self._api().current_device())

    def get_device_name(self, device_id: int = 0) -> str:
        return str(self._api().get_device_name(device_id))

    def get_device_total_memory(self, device_id: int = 0) -> int:
        return int(self._api().get_device_properties(device_id).total_memory)

    def get_available_gpu_memory(self, device_id: int = 0, empty_cache: bool = True) -> float:
        api = self._api()
        if empty_cache:
            api.empty_cache()
        free, _ = api.mem_get_info(device_id)
        return free / (1 << 30)

    def get_device_capability(self, device_id: int = 0) -> DeviceCapability | None:
        major, minor = self._api().get_device_capability(device_id)
        return DeviceCapability(major, minor)


class CudaPlatform(_TorchAccelerator):
    _enum = PlatformEnum.CUDA
    device_name = "cuda"
    device_type = "cuda"
    dispatch_key = "CUDA"

    def get_torch_distributed_backend_str(self) -> str:
        return "nccl"

    def supports_distributed_device_id(self) -> bool:
        return True

    def get_device_uuid(self, device_id: int = 0) -> str:
        return str(self._api().get_device_properties(device_id).uuid)


class RocmPlatform(CudaPlatform):
    _enum = PlatformEnum.ROCM
    device_name = "rocm"


class XpuPlatform(_TorchAccelerator):
    _enum = PlatformEnum.XPU
    _module = "xpu"
    device_name = "xpu"
    device_type = "xpu"
    dispatch_key = "XPU"

    def get_torch_distributed_backend_str(self) -> str:
        return "xccl"


class MpsPlatform(Platform):
    _enum = PlatformEnum.MPS
    device_name = "mps"
    device_type = "mps"
    dispatch_key = "MPS"

    def get_device(self, local_rank: int) -> Any:
        import torch

        return torch.device("mps")


class NpuPlatform(_TorchAccelerator):
    _enum = PlatformEnum.NPU
    _module = "npu"
    device_name = "npu"
    device_type = "npu"
    dispatch_key = "PrivateUse1"

    def get_torch_distributed_backend_str(self) -> str:
        return "hccl"


class MusaPlatform(_TorchAccelerator):
    _enum = PlatformEnum.MUSA
    _module = "musa"
    device_name = "musa"
    device_type = "musa"
    dispatch_key = "PrivateUse1"

    def get_torch_distributed_backend_str(self) -> str:
        return "mccl"


def _has(module: str) -> bool:
    import torch

    api = getattr(torch, module, None)
    try:
        return bool(api is not None and api.is_available())
    except Exception:
        return False


def _mps() -> bool:
    import torch

    return bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())


def _rocm() -> bool:
    import torch

    return _has("cuda") and getattr(torch.version, "hip", None) is not None


def _cuda() -> bool:
    import torch

    return _has("cuda") and getattr(torch.version, "hip", None) is None


# name -> (class, detector), in detection order; CPU always matches.
BUILTINS: dict[str, tuple[type[Platform], Callable[[], bool]]] = {
    "mps": (MpsPlatform, _mps),
    "xpu": (XpuPlatform, lambda: _has("xpu")),
    "rocm": (RocmPlatform, _rocm),
    "cuda": (CudaPlatform, _cuda),
    "npu": (NpuPlatform, lambda: _has("npu")),
    "musa": (MusaPlatform, lambda: _has("musa")),
    "cpu": (CpuPlatform, lambda: True),
}
