"""The diffusion ``Platform`` base class and its identity enum.

Separate from SRT's ``SRTPlatform``: a package that supports both runtimes
defines two classes, each with its own runtime's ``PlatformEnum.OOT``.

The contract is checked when a subclass is *defined* (public methods the
interface does not declare are rejected, overrides must accept the base
parameters). Methods marked Active in ``docs/plugin_contract.md`` are called by
this runtime through ``current_platform``; everything else is not a stable
out-of-tree contract. Importing this module imports no torch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from sglang.multimodal_gen.runtime.platforms.errors import DiffusionPlatformContractError
from sglang.plugin_core.contract import check_subclass
from sglang.plugin_core.identity import CpuArchEnum, DeviceCapability, cpu_architecture, platform_enum, seed_host_rngs

if TYPE_CHECKING:
    from sglang.multimodal_gen.runtime.server_args import ServerArgs

PlatformEnum = platform_enum(
    __name__, "Identity of a diffusion platform (not shared with SRT's enum).", ("CUDA", "ROCM", "XPU", "MPS", "NPU", "MUSA", "CPU")
)


class Platform:
    """Base class of every diffusion platform, built-in or out-of-tree.

    Subclasses must be constructible without arguments. An out-of-tree class
    sets ``_enum = PlatformEnum.OOT`` and non-blank ``device_name`` and
    ``device_type``; ``dispatch_key`` is the PyTorch dispatch key used for
    ``torch.library`` registrations, and ``get_dispatch_key_name()`` picks the
    ``CustomOp`` implementation (the two are deliberately separate).
    """

    _sglang_interface = True

    _enum: PlatformEnum = PlatformEnum.UNSPECIFIED
    device_name: str = ""
    device_type: str = ""
    dispatch_key: str = "CPU"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        check_subclass(cls, "sglang.multimodal_gen.runtime.platforms.Platform", DiffusionPlatformContractError)

    # -- identity ------------------------------------------------------------

    def is_cuda(self) -> bool:
        return self._enum is PlatformEnum.CUDA

    def is_rocm(self) -> bool:
        return self._enum is PlatformEnum.ROCM

    def is_cuda_alike(self) -> bool:
        return self._enum in (PlatformEnum.CUDA, PlatformEnum.ROCM)

    def is_xpu(self) -> bool:
        return self._enum is PlatformEnum.XPU

    def is_mps(self) -> bool:
        return self._enum is PlatformEnum.MPS

    def is_npu(self) -> bool:
        return self._enum is PlatformEnum.NPU

    def is_musa(self) -> bool:
        return self._enum is PlatformEnum.MUSA

    def is_cpu(self) -> bool:
        return self._enum is PlatformEnum.CPU

    def is_out_of_tree(self) -> bool:
        return self._enum is PlatformEnum.OOT

    # -- initialization and configuration (Active) ---------------------------

    def init_backend(self) -> None:
        """Once per worker process, before any worker implementation is imported."""

    def apply_server_args_defaults(self, server_args: ServerArgs) -> None:
        """Adjust ``ServerArgs`` defaults while they are built (fields left ``None``)."""

    # -- device and memory (Active) -------------------------------------------

    def get_device(self, local_rank: int) -> Any:
        import torch

        return torch.device(self.device_type, local_rank)

    def set_device(self, device: Any) -> None:
        """Make ``device`` current for this process (no-op where there is no such notion)."""

    def get_local_torch_device(self) -> Any:
        import torch

        return torch.device(self.device_type)

    def get_device_name(self, device_id: int = 0) -> str:
        return self.device_name

    def get_device_uuid(self, device_id: int = 0) -> str:
        return f"{self.device_name}-{device_id}"

    def get_device_total_memory(self, device_id: int = 0) -> int:
        """Bytes of memory on the device."""
        from sglang.host import total_memory

        return total_memory()

    def get_available_gpu_memory(self, device_id: int = 0, empty_cache: bool = True) -> float:
        """GiB of memory available on the device now."""
        from sglang.host import available_memory

        return available_memory() / (1 << 30)

    def get_device_capability(self, device_id: int = 0) -> DeviceCapability | None:
        return None

    # -- distributed (Active) ----------------------------------------------------

    def get_torch_distributed_backend_str(self) -> str:
        return "gloo"

    def supports_distributed_device_id(self) -> bool:
        """Whether ``init_process_group(device_id=...)`` may be passed this device."""
        return False

    def get_device_communicator_cls(self) -> str:
        """Compatibility: the communicator class of older platforms (fallback of the next)."""
        return "sglang.multimodal_gen.runtime.distributed.communication.TorchAllToAllCommunicator"

    def get_all_to_all_communicator_cls(self) -> str:
        """Qualified name of the class behind ``all_to_all_4D()``; override this one."""
        return self.get_device_communicator_cls()

    def get_cpu_architecture(self) -> CpuArchEnum:
        return cpu_architecture()

    # -- dispatch and model (Active) --------------------------------------------

    def get_torch_library_dispatch_key(self) -> str:
        return self.dispatch_key

    def get_dispatch_key_name(self) -> str:
        """The ``<key>`` of the ``forward_<key>()`` a ``CustomOp`` dispatches to."""
        return self.device_type or "native"

    def get_attn_backend_cls_str(self, selected_backend: Any, head_size: int, dtype: Any) -> str:
        """Qualified name of the attention backend class.

        ``selected_backend`` is an ``AttentionBackendEnum`` member or ``None``
        when the user chose nothing (a custom class may be returned then).
        """
        from sglang.multimodal_gen.runtime.layers.attention.selector import default_backend_cls_str

        return default_backend_cls_str(selected_backend)

    def verify_model_arch(self, model_arch: str) -> None:
        """Raise with the reason when this platform cannot run ``model_arch``."""

    def optimize_vae(self, vae: Any) -> Any:
        """Return the decoder to use (optimized or as is)."""
        return vae

    # -- execution (Active) -------------------------------------------------------

    def get_compile_backend(self) -> str:
        return "inductor"

    def get_compile_options(self) -> dict[str, Any]:
        return {}

    @contextlib.contextmanager
    def inference_mode(self) -> Iterator[None]:
        import torch

        with torch.inference_mode():
            yield

    def seed_everything(self, seed: int | None = None) -> None:
        if seed is None:
            return
        seed_host_rngs(seed)

    def enable_dit_layerwise_offload_by_default(self) -> bool:
        return False

    def __repr__(self) -> str:
        cls = type(self)
        return f"{cls.__module__}.{cls.__qualname__}(device_name={self.device_name!r}, device_type={self.device_type!r})"

