"""SRT platforms and the lazy ``current_platform`` singleton.

``from sglang.srt.platforms import current_platform`` resolves the platform on
first access (see :mod:`sglang.srt.platforms.selection` for the chain), once
per process and thread-safely; a failure is re-raised on every later access.
Importing this package imports no torch and no plugin.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sglang.plugin_core.lazy_platform import LazyPlatform
from sglang.plugin_core.once import OncePerProcess
from sglang.srt.platforms.device_mixin import CpuArchEnum, DeviceCapability, DeviceMixin, PlatformEnum
from sglang.srt.platforms.errors import (
    PlatformActivationError,
    PlatformClassError,
    PlatformError,
    PlatformSelectionError,
    PlatformUnavailableError,
)
from sglang.srt.platforms.interface import SRTPlatform

if TYPE_CHECKING:
    from sglang.plugin_core.decision import PlatformDecision


def _chain() -> tuple[SRTPlatform, PlatformDecision]:
    from sglang.srt.platforms.selection import resolve_platform

    return resolve_platform()


_LAZY = LazyPlatform("SRT", _chain, globals())


def _resolve() -> SRTPlatform:
    return _LAZY.get()


def lazy_platform() -> LazyPlatform:
    """The object behind ``current_platform`` (its selection state), for the developer kit."""
    return _LAZY


def get_platform_decision() -> PlatformDecision:
    """The record of how ``current_platform`` was chosen (resolving it if needed)."""
    return _LAZY.get_decision()


def is_platform_resolved() -> bool:
    return _LAZY.resolved


def _init_backend() -> SRTPlatform:
    plat = _resolve()
    plat.init_backend()
    return plat


_BACKEND_ONCE = OncePerProcess("SRT init_backend()", _init_backend)


def init_platform_backend() -> SRTPlatform:
    """Run ``current_platform.init_backend()`` at most once per process; failures are terminal.

    Every worker calls this before its model is built.
    """
    plat = _BACKEND_ONCE()
    return plat if plat is not None else _resolve()


def __getattr__(name: str) -> Any:
    if name == "current_platform":
        return _resolve()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CpuArchEnum",
    "DeviceCapability",
    "DeviceMixin",
    "PlatformActivationError",
    "PlatformClassError",
    "PlatformEnum",
    "PlatformError",
    "PlatformSelectionError",
    "PlatformUnavailableError",
    "SRTPlatform",
    "current_platform",
    "get_platform_decision",
    "init_platform_backend",
]
