"""SRT platforms and the lazy ``current_platform`` singleton.

``from sglang.srt.platforms import current_platform`` resolves the platform on
first access (see :mod:`sglang.srt.platforms.selection` for the chain), once
per process and thread-safely; a failure is re-raised on every later access.
Importing this package imports no torch and no plugin.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

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
    from sglang.srt.platforms.selection import PlatformDecision

logger = logging.getLogger(__name__)


class _Resolution:
    """Holder of the once-per-process outcome (no module ``global`` statements)."""

    lock = threading.Lock()
    platform: SRTPlatform | None = None
    decision: PlatformDecision | None = None
    error: BaseException | None = None


def _resolve() -> SRTPlatform:
    r = _Resolution
    if r.platform is not None:
        return r.platform
    with r.lock:
        if r.error is not None:
            raise r.error
        if r.platform is None:
            from sglang.srt.platforms.selection import resolve_platform

            try:
                plat, decision = resolve_platform()
            except BaseException as exc:
                r.error = exc
                raise
            r.decision = decision
            r.platform = plat
            globals()["current_platform"] = plat  # later reads skip __getattr__
            logger.info("SRT %s", decision.format())
    return r.platform


def get_platform_decision() -> PlatformDecision:
    """The record of how ``current_platform`` was chosen (resolving it if needed)."""
    _resolve()
    assert _Resolution.decision is not None
    return _Resolution.decision


def is_platform_resolved() -> bool:
    return _Resolution.platform is not None


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
]
