"""``DeviceMixin``: SRT platform identity and device operations.

Defaults are exactly those of the interface reference: identity predicates
follow ``_enum``; device operations marked *Planned* in the reference either
``raise NotImplementedError`` or do nothing, as documented per method. Torch is
imported inside the methods that need it, never at module import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sglang.plugin_core.identity import CpuArchEnum, DeviceCapability, cpu_architecture, platform_enum, seed_host_rngs

if TYPE_CHECKING:
    import torch


PlatformEnum = platform_enum(__name__, "SRT platform identity. Out-of-tree platforms use ``OOT``.", ("CUDA", "ROCM", "CPU", "XPU", "MUSA", "NPU", "TPU", "MPS"))


class DeviceMixin:
    """Identity queries and device operations of an SRT platform.

    A vendor subclass of this mixin is not checked on its own: it is checked
    as part of the ``SRTPlatform`` subclass that mixes it in (either base
    order), see :mod:`sglang.plugin_core.contract`.
    """

    _sglang_interface = True
    _enum: PlatformEnum = PlatformEnum.UNSPECIFIED
    device_name: str = "unknown"
    device_type: str = "unknown"  # the torch device type, e.g. "cuda", "cpu"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(device={self.device_name})"

    # -- identity (from _enum) ---------------------------------------------
    def is_cuda(self) -> bool:
        return self._enum is PlatformEnum.CUDA

    def is_rocm(self) -> bool:
        return self._enum is PlatformEnum.ROCM

    def is_npu(self) -> bool:
        return self._enum is PlatformEnum.NPU

    def is_cpu(self) -> bool:
        return self._enum is PlatformEnum.CPU

    def is_xpu(self) -> bool:
        return self._enum is PlatformEnum.XPU

    def is_musa(self) -> bool:
        return self._enum is PlatformEnum.MUSA

    def is_tpu(self) -> bool:
        return self._enum is PlatformEnum.TPU

    def is_mps(self) -> bool:
        return self._enum is PlatformEnum.MPS

    def is_cuda_alike(self) -> bool:
        """True for CUDA-like APIs: CUDA, ROCm and MUSA."""
        return self._enum in (PlatformEnum.CUDA, PlatformEnum.ROCM, PlatformEnum.MUSA)

    def is_out_of_tree(self) -> bool:
        return self._enum is PlatformEnum.OOT

    # -- device operations --------------------------------------------------
    def get_device(self, local_rank: int) -> torch.device:
        raise NotImplementedError(f"{type(self).__name__} does not implement get_device()")

    def set_device(self, device: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not implement set_device()")

    def get_device_name(self, device_id: int = 0) -> str:
        raise NotImplementedError(f"{type(self).__name__} does not implement get_device_name()")

    def get_device_uuid(self, device_id: int = 0) -> str:
        raise NotImplementedError(f"{type(self).__name__} does not implement get_device_uuid()")

    def get_device_capability(self, device_id: int = 0) -> DeviceCapability | None:
        raise NotImplementedError(f"{type(self).__name__} does not implement get_device_capability()")

    def empty_cache(self) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def get_device_total_memory(self, device_id: int = 0) -> int:
        """Total device memory in bytes. [Active]"""
        raise NotImplementedError(f"{type(self).__name__} does not implement get_device_total_memory()")

    def get_available_memory(self, device_id: int = 0) -> tuple[int, int]:
        """``(free_bytes, total_bytes)``."""
        raise NotImplementedError(f"{type(self).__name__} does not implement get_available_memory()")

    def get_current_memory_usage(self, device: Any = None) -> float:
        """Current peak memory usage in bytes. [Active]"""
        raise NotImplementedError(f"{type(self).__name__} does not implement get_current_memory_usage()")

    def is_pin_memory_available(self, device: Any = None) -> bool:
        """Whether pinned host memory can be used for this device. [Active]"""
        return False

    def get_torch_distributed_backend_str(self) -> str:
        raise NotImplementedError(f"{type(self).__name__} does not implement get_torch_distributed_backend_str()")

    def get_communicator_class(self) -> type | None:
        return None

    def inference_mode(self) -> Any:
        import torch

        return torch.inference_mode(True)

    def seed_everything(self, seed: int) -> None:
        seed_host_rngs(seed)

    def verify_quantization(self, quant: str | None) -> None:
        pass

    def get_cpu_architecture(self) -> CpuArchEnum:
        return cpu_architecture()
