"""SRT platforms and the lazy ``current_platform`` singleton.

``from sglang.srt.platforms import current_platform`` resolves the platform on
first access (the chain: :mod:`sglang.plugin_core.selection`, declared for SRT
in :mod:`.selection`), once per process and thread-safely; a failure is
re-raised on every later access. Importing this package imports no torch and
no plugin.
"""

from __future__ import annotations

from typing import Any

from sglang.plugin_core.host import PlatformHost
from sglang.srt.platforms.device_mixin import CpuArchEnum, DeviceCapability, DeviceMixin, PlatformEnum
from sglang.srt.platforms.errors import (
    PlatformActivationError,
    PlatformClassError,
    PlatformContractError,
    PlatformError,
    PlatformSelectionError,
    PlatformUnavailableError,
)
from sglang.srt.platforms.interface import PlatformCapabilities, SRTPlatform
from sglang.srt.platforms.selection import RUNTIME

HOST = PlatformHost(RUNTIME, globals())
get_platform_decision = HOST.decision
is_platform_resolved = HOST.is_resolved
lazy_platform = HOST.lazy_platform


def init_platform_backend() -> SRTPlatform:
    """Run ``current_platform.init_backend()`` at most once per process; failures are terminal.

    Every worker calls this before its model is built.
    """
    return HOST.init_backend()


def __getattr__(name: str) -> Any:
    return HOST.module_getattr(__name__, name)


__all__ = [
    "CpuArchEnum",
    "DeviceCapability",
    "DeviceMixin",
    "PlatformActivationError",
    "PlatformCapabilities",
    "PlatformClassError",
    "PlatformContractError",
    "PlatformEnum",
    "PlatformError",
    "PlatformSelectionError",
    "PlatformUnavailableError",
    "SRTPlatform",
    "current_platform",
    "get_platform_decision",
    "init_platform_backend",
]
