"""The SRT runtime's declaration for the shared selection chain, and its fallback rule.

The chain itself is :class:`sglang.plugin_core.selection.SelectionChain`:
``SGLANG_PLATFORM`` names a platform plugin explicitly (absent: a
``PlatformSelectionError`` listing what is installed; ``activate()`` returning
``None``: ``PlatformUnavailableError``); unset, exactly one active plugin is
chosen, several are an error, and none falls back to :func:`fallback`::

    SGLANG_USE_CPU_ENGINE=1 -> the CPU engine, else CUDA, ROCm, XPU, else the base SRTPlatform

``SGLANG_PLUGINS`` filters platform entry points by name as well.
"""

from __future__ import annotations

import os

from sglang.plugin_core.decision import PlatformDecision
from sglang.plugin_core.discovery import EntryPointInfo
from sglang.plugin_core.runtime import Runtime, SelectionErrors
from sglang.plugin_core.selection import SelectionChain
from sglang.srt.platforms.errors import (
    PlatformActivationError,
    PlatformClassError,
    PlatformSelectionError,
    PlatformUnavailableError,
)
from sglang.srt.platforms.interface import SRTPlatform

GROUP = "sglang.srt.platforms"
PLUGIN_GROUP = "sglang.srt.plugins"
PLATFORM_ENV = "SGLANG_PLATFORM"
CPU_ENGINE_ENV = "SGLANG_USE_CPU_ENGINE"
CPU_ENGINE_RULE_ENV = "SGLANG_CPU_ENGINE_RULE"  # set with CPU_ENGINE_ENV by the start-up order, never by a user


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def fallback() -> tuple[type[SRTPlatform], str]:
    """The built-in platform when no plugin is active, with the rule that chose it."""
    if _truthy(os.environ.get(CPU_ENGINE_ENV)):
        from sglang.srt.platforms.cpu import CpuSRTPlatform

        return CpuSRTPlatform, os.environ.get(CPU_ENGINE_RULE_ENV) or f"fallback: {CPU_ENGINE_ENV}=1"
    try:
        import torch
    except ImportError:
        return SRTPlatform, "fallback: torch is not installed, base SRTPlatform"
    if torch.cuda.is_available():
        from sglang.srt.platforms.cuda import CudaSRTPlatform, RocmSRTPlatform

        if getattr(torch.version, "hip", None):
            return RocmSRTPlatform, "fallback: ROCm available"
        return CudaSRTPlatform, "fallback: CUDA available"
    if hasattr(torch, "xpu") and torch.xpu.is_available():
        from sglang.srt.platforms.xpu import XpuSRTPlatform

        return XpuSRTPlatform, "fallback: XPU available"
    return SRTPlatform, (
        "fallback: no platform plugin active and no accelerator found, base SRTPlatform "
        f"(set {CPU_ENGINE_ENV}=1 for the CPU engine)"
    )


RUNTIME = Runtime(
    name="SRT",
    noun="platform",
    platform_group=GROUP,
    plugin_group=PLUGIN_GROUP,
    selector_env=PLATFORM_ENV,
    base=SRTPlatform,
    base_path="sglang.srt.platforms.interface.SRTPlatform",
    errors=SelectionErrors(PlatformSelectionError, PlatformActivationError, PlatformClassError, PlatformUnavailableError),
    fallback=fallback,
)

CHAIN = SelectionChain(RUNTIME)


def activate(info: EntryPointInfo) -> str | None:
    """Import and call one entry point's activation callback."""
    return CHAIN.activate(info)


def instantiate(qualname: str, info: EntryPointInfo | None) -> SRTPlatform:
    """Import ``qualname`` (``a.b.C`` or ``a.b:C``), check it, construct it."""
    plat = CHAIN.instantiate(qualname, info)
    assert isinstance(plat, SRTPlatform)
    return plat


def resolve_platform() -> tuple[SRTPlatform, PlatformDecision]:
    """Run the selection chain once; callers cache the result."""
    plat, decision = CHAIN.resolve()
    assert isinstance(plat, SRTPlatform)
    return plat, decision
