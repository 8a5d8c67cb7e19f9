"""``SRTPlatform``: capability flags, subsystem factories and lifecycle hooks.

Device identity and operations come from :class:`DeviceMixin`. ``SRTPlatform``
deliberately defines none of them itself, so in the documented vendor layout
``class MySRTPlatform(SRTPlatform, MyDeviceMixin)`` the vendor mixin's device
methods win in the MRO.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from sglang.plugin_core.contract import check_subclass
from sglang.srt.platforms.device_mixin import DeviceMixin
from sglang.srt.platforms.errors import PlatformContractError

if TYPE_CHECKING:
    from sglang.srt.server_args import ServerArgs


@dataclass(frozen=True)
class PlatformCapabilities:
    """What a platform can do, as flags the engine reads instead of platform names.

    Every flag is ``False`` by default; a vendor declares what its device
    supports on its subclass: ``capabilities = PlatformCapabilities(supports_triton=True)``.
    The engine branches on these (``supports_cuda_graph`` gates graph capture,
    ``supports_pin_memory`` pinned host-to-device copies).
    """

    supports_triton: bool = False
    supports_cuda_graph: bool = False
    supports_torch_compile: bool = False
    supports_fp8: bool = False
    supports_pin_memory: bool = False


class SRTPlatform(DeviceMixin):
    """Base class of every SRT platform; also the last-resort fallback platform.

    Who calls what: the engine reads the capability flags and factories through
    ``current_platform``; ``apply_server_args_defaults`` runs inside
    ``ServerArgs.__post_init__``; ``init_backend`` runs once in each worker
    before the model is built.
    """

    _sglang_interface = True
    capabilities: ClassVar[PlatformCapabilities] = PlatformCapabilities()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # the whole platform, vendor mixins included, is checked here (PlatformContractError, a TypeError)
        super().__init_subclass__(**kwargs)
        check_subclass(cls, "SRT platform", PlatformContractError)

    # -- capability flags ---------------------------------------------------
    def support_cuda_graph(self) -> bool:
        return self.capabilities.supports_cuda_graph

    def support_piecewise_cuda_graph(self) -> bool:
        return False

    def supports_fp8(self) -> bool:
        return self.capabilities.supports_fp8

    # -- subsystem factories ------------------------------------------------
    def get_default_attention_backend(self) -> str:
        raise NotImplementedError(f"{type(self).__name__} does not implement get_default_attention_backend()")

    def get_graph_runner_cls(self) -> type:
        raise NotImplementedError(f"{type(self).__name__} does not implement get_graph_runner_cls()")

    def get_mha_kv_pool_cls(self) -> type:
        raise NotImplementedError(f"{type(self).__name__} does not implement get_mha_kv_pool_cls()")

    def get_mla_kv_pool_cls(self) -> type:
        raise NotImplementedError(f"{type(self).__name__} does not implement get_mla_kv_pool_cls()")

    def get_dsa_kv_pool_cls(self) -> type:
        raise NotImplementedError(f"{type(self).__name__} does not implement get_dsa_kv_pool_cls()")

    def get_paged_allocator_cls(self) -> type:
        raise NotImplementedError(f"{type(self).__name__} does not implement get_paged_allocator_cls()")

    def get_quantization_config(self, quantization: str | None) -> Any:
        """Hardware-specific config for ``quantization``; ``None`` means use the default."""
        raise NotImplementedError(f"{type(self).__name__} does not implement get_quantization_config()")

    def get_piecewise_backend_cls(self) -> type:
        raise NotImplementedError(f"{type(self).__name__} does not implement get_piecewise_backend_cls()")

    def get_compile_backend(self, mode: str | None = None) -> str:
        return "inductor"

    def get_ray_bundle(self, cpus: int) -> dict[str, float]:
        """The Ray placement-group bundle of one scheduler rank under ``--use-ray`` (``cpus``: its share of
        the cluster's CPUs). Default: ``{"CPU": cpus}`` on a CPU platform, ``{"GPU": 1, "CPU": cpus}`` otherwise;
        a vendor whose device Ray knows under another resource name returns that."""
        return {"CPU": float(cpus)} if self.is_cpu() else {"GPU": 1.0, "CPU": float(cpus)}

    def get_dispatch_key_name(self) -> str:
        """Dispatch key of fused ops (``BaseFusedOp``)."""
        return "native"

    # -- lifecycle hooks ----------------------------------------------------
    def apply_server_args_defaults(self, server_args: ServerArgs) -> Mapping[str, Any] | None:
        """Platform defaults while ``ServerArgs`` resolves: return ``{field: value}`` (declared under the
        platform's name), or call ``sglang.srt.arg_groups.overrides.declare`` yourself; never assign fields."""
        return None

    def init_backend(self) -> None:
        """One-time backend initialization, in each worker, before the model is built."""
