"""Diffusion platforms: the lazy ``current_platform`` and backend initialization.

Import-safe (no torch, no plugin, nothing of the runtime): an offline script
and a plugin may import this at module scope, subclass :class:`Platform` and
register hooks before any backend is initialized.

``current_platform`` resolves on first access, once per process and
thread-safely (the chain is in :mod:`.selection`); selection and instance are
published together only after the external class was validated, and a failure
is re-raised on every later access. :func:`initialize_current_platform` runs
``init_backend()`` at most once per process; a failure is terminal.
"""

from __future__ import annotations

from typing import Any

from sglang.multimodal_gen.runtime.platforms.errors import (
    BackendInitError,
    DiffusionPlatformActivationError,
    DiffusionPlatformClassError,
    DiffusionPlatformContractError,
    DiffusionPlatformError,
    DiffusionPlatformSelectionError,
    DiffusionPlatformUnavailableError,
)
from sglang.multimodal_gen.runtime.platforms.interface import CpuArchEnum, DeviceCapability, Platform, PlatformEnum
from sglang.multimodal_gen.runtime.platforms.selection import RUNTIME
from sglang.plugin_core.host import PlatformHost
from sglang.plugin_core.once import ActivationFailedError

HOST = PlatformHost(RUNTIME, globals())
get_platform_decision = HOST.decision
is_platform_resolved = HOST.is_resolved
lazy_platform = HOST.lazy_platform


def initialize_current_platform() -> Platform:
    """Resolve ``current_platform`` and run its ``init_backend()``; once per process.

    Workers call this first, before plugins are loaded and before any worker
    implementation is imported. Later calls return the platform; after a
    failure every call raises ``ActivationFailedError`` ("previously failed",
    chained to the cause).
    """
    return HOST.init_backend()


def is_backend_initialized() -> bool:
    return HOST.backend_once.done


def __getattr__(name: str) -> Any:
    return HOST.module_getattr(__name__, name)


__all__ = [
    "ActivationFailedError",
    "BackendInitError",
    "CpuArchEnum",
    "DeviceCapability",
    "DiffusionPlatformActivationError",
    "DiffusionPlatformClassError",
    "DiffusionPlatformContractError",
    "DiffusionPlatformError",
    "DiffusionPlatformSelectionError",
    "DiffusionPlatformUnavailableError",
    "Platform",
    "PlatformEnum",
    "current_platform",
    "get_platform_decision",
    "initialize_current_platform",
    "is_backend_initialized",
]
