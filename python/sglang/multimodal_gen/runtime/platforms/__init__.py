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

import logging
from typing import TYPE_CHECKING, Any

from sglang.multimodal_gen.runtime.platforms.errors import (
    BackendInitError,
    DiffusionPlatformActivationError,
    DiffusionPlatformClassError,
    DiffusionPlatformError,
    DiffusionPlatformSelectionError,
)
from sglang.multimodal_gen.runtime.platforms.interface import CpuArchEnum, DeviceCapability, Platform, PlatformEnum
from sglang.plugin_core.lazy_platform import LazyPlatform
from sglang.plugin_core.once import ActivationFailedError, OncePerProcess

if TYPE_CHECKING:
    from sglang.plugin_core.decision import PlatformDecision

logger = logging.getLogger(__name__)


def _chain() -> tuple[Platform, PlatformDecision]:
    from sglang.multimodal_gen.runtime.platforms.selection import resolve_platform

    return resolve_platform()


_LAZY = LazyPlatform("diffusion", _chain, globals())


def _resolve() -> Platform:
    return _LAZY.get()


def lazy_platform() -> LazyPlatform:
    """The object behind ``current_platform`` (its selection state), for the developer kit."""
    return _LAZY


def get_platform_decision() -> PlatformDecision:
    """How ``current_platform`` was chosen (resolving it if needed)."""
    return _LAZY.get_decision()


def is_platform_resolved() -> bool:
    return _LAZY.resolved


def _init_backend() -> Platform:
    plat = _resolve()
    try:
        plat.init_backend()
    except Exception as exc:
        raise BackendInitError(
            f"init_backend() of diffusion platform {plat!r} raised {type(exc).__name__}: {exc}; start-up aborts and "
            "this process does not retry it. Fix the platform package or select another platform with "
            "SGLANG_DIFFUSION_PLATFORM_OVERRIDE."
        ) from exc
    logger.debug("diffusion backend initialized: %r", plat)
    return plat


_BACKEND_ONCE = OncePerProcess("diffusion init_backend()", _init_backend)


def initialize_current_platform() -> Platform:
    """Resolve ``current_platform`` and run its ``init_backend()``; once per process.

    Workers call this first, before plugins are loaded and before any worker
    implementation is imported. Later calls return the platform; after a
    failure every call raises ``ActivationFailedError`` ("previously failed",
    chained to the cause).
    """
    plat = _BACKEND_ONCE()
    return plat if plat is not None else _resolve()


def is_backend_initialized() -> bool:
    return _BACKEND_ONCE.done


def __getattr__(name: str) -> Any:
    if name == "current_platform":
        return _resolve()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ActivationFailedError",
    "BackendInitError",
    "CpuArchEnum",
    "DeviceCapability",
    "DiffusionPlatformActivationError",
    "DiffusionPlatformClassError",
    "DiffusionPlatformError",
    "DiffusionPlatformSelectionError",
    "Platform",
    "PlatformEnum",
    "current_platform",
    "get_platform_decision",
    "initialize_current_platform",
    "is_backend_initialized",
]
