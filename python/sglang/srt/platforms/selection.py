"""The SRT platform selection chain and the record of its decision.

``SGLANG_PLATFORM`` set (front-loading filter)::

    no entry point of that name   -> PlatformSelectionError (lists what is installed)
    activate() returns a name     -> that platform
    activate() returns None       -> PlatformUnavailableError (hardware not available)

``SGLANG_PLATFORM`` unset (auto-discovery; ``SGLANG_PLUGINS`` filters by name)::

    0 active -> SGLANG_USE_CPU_ENGINE=1: CPU, else CUDA, ROCm, XPU, else base SRTPlatform
    1 active -> it
    N active -> PlatformSelectionError (set SGLANG_PLATFORM)

A plugin that fails to import, raises, returns a non-string, or names a class
that does not import or is not an ``SRTPlatform`` aborts selection with an error
naming the entry point and its distribution: never a silent fallback.
"""

from __future__ import annotations

import os

from sglang.plugin_core.decision import Candidate, PlatformDecision
from sglang.plugin_core.discovery import EntryPointInfo, allowed_plugins, import_qualname, list_entry_points
from sglang.srt.platforms.errors import (
    PlatformActivationError,
    PlatformClassError,
    PlatformSelectionError,
    PlatformUnavailableError,
)
from sglang.srt.platforms.interface import SRTPlatform

GROUP = "sglang.srt.platforms"
PLATFORM_ENV = "SGLANG_PLATFORM"
CPU_ENGINE_ENV = "SGLANG_USE_CPU_ENGINE"
CPU_ENGINE_RULE_ENV = "SGLANG_CPU_ENGINE_RULE"  # set with CPU_ENGINE_ENV by the start-up order, never by a user


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def _candidate(info: EntryPointInfo, status: str, reason: str = "") -> Candidate:
    return Candidate(info.name, info.value, info.dist, info.version, status, reason)


def activate(info: EntryPointInfo) -> str | None:
    """Import and call one entry point's activation callback."""
    try:
        fn = info.load()
    except Exception as exc:
        raise PlatformActivationError(
            f"platform {info.label} failed to import: {type(exc).__name__}: {exc}. Start-up aborts instead of "
            f"falling back; fix or uninstall {info.dist or 'the plugin'}."
        ) from exc
    if not callable(fn):
        raise PlatformActivationError(f"platform {info.label} is not callable; it must name an activate() function")
    try:
        qualname = fn()
    except Exception as exc:
        raise PlatformActivationError(
            f"activate() of platform {info.label} raised {type(exc).__name__}: {exc}. Start-up aborts instead of "
            f"falling back; fix {info.dist or 'the plugin'}, or uninstall it."
        ) from exc
    if qualname is not None and not isinstance(qualname, str):
        raise PlatformActivationError(
            f"activate() of platform {info.label} returned {type(qualname).__name__} {qualname!r}; it must return "
            "the platform class's qualified name as a string, or None when the hardware is absent"
        )
    return qualname


def instantiate(qualname: str, info: EntryPointInfo | None) -> SRTPlatform:
    """Import ``qualname`` (``a.b.C`` or ``a.b:C``), check it, construct it."""
    where = info.label if info else "built-in"
    try:
        cls = import_qualname(qualname)
    except Exception as exc:
        raise PlatformClassError(f"platform class {qualname!r} named by {where} does not import: {type(exc).__name__}: {exc}") from exc
    if not (isinstance(cls, type) and issubclass(cls, SRTPlatform)):
        raise PlatformClassError(
            f"{qualname!r} named by {where} is not a subclass of sglang.srt.platforms.interface.SRTPlatform"
        )
    try:
        return cls()
    except Exception as exc:
        raise PlatformActivationError(f"constructing {qualname} named by {where} raised {type(exc).__name__}: {exc}") from exc


def _explicit(name: str, infos: list[EntryPointInfo]) -> tuple[SRTPlatform, PlatformDecision]:
    matches = [i for i in infos if i.name == name]
    # others are listed by name only: reading their metadata would cost one file each
    others = [Candidate(i.name, i.value, None, None, "not-probed", f"{PLATFORM_ENV}={name}") for i in infos if i.name != name]
    if not matches:
        available = ", ".join(sorted({i.name for i in infos})) or "none"
        raise PlatformSelectionError(
            f"{PLATFORM_ENV}={name!r} matches no installed platform plugin (entry-point group {GROUP!r}); "
            f"available: {available}. Install the package that provides {name!r} (pip install <package>), "
            f"or unset {PLATFORM_ENV} to auto-detect."
        )
    if len(matches) > 1:
        dists = ", ".join(str(m.dist) for m in matches)
        raise PlatformSelectionError(
            f"{PLATFORM_ENV}={name!r} is provided by several distributions ({dists}); uninstall all but one"
        )
    info = matches[0]
    qualname = activate(info)
    if qualname is None:
        raise PlatformUnavailableError(
            f"platform {info.label} selected by {PLATFORM_ENV} reports its hardware is not available "
            f"(activate() returned None). Check the device and its driver, or unset {PLATFORM_ENV}."
        )
    plat = instantiate(qualname, info)
    chosen = _candidate(info, "selected", f"{PLATFORM_ENV}={name}")
    return plat, PlatformDecision(f"explicit: {PLATFORM_ENV}={name}", qualname, info.name, info.dist, info.version, [chosen, *others])


def _fallback() -> tuple[SRTPlatform, str]:
    if _truthy(os.environ.get(CPU_ENGINE_ENV)):
        from sglang.srt.platforms.cpu import CpuSRTPlatform

        return CpuSRTPlatform(), os.environ.get(CPU_ENGINE_RULE_ENV) or f"fallback: {CPU_ENGINE_ENV}=1"
    try:
        import torch
    except ImportError:
        return SRTPlatform(), "fallback: torch is not installed, base SRTPlatform"
    if torch.cuda.is_available():
        if getattr(torch.version, "hip", None):
            from sglang.srt.platforms.cuda import RocmSRTPlatform

            return RocmSRTPlatform(), "fallback: ROCm available"
        from sglang.srt.platforms.cuda import CudaSRTPlatform

        return CudaSRTPlatform(), "fallback: CUDA available"
    if hasattr(torch, "xpu") and torch.xpu.is_available():
        from sglang.srt.platforms.xpu import XpuSRTPlatform

        return XpuSRTPlatform(), "fallback: XPU available"
    return SRTPlatform(), (
        "fallback: no platform plugin active and no accelerator found, base SRTPlatform "
        f"(set {CPU_ENGINE_ENV}=1 for the CPU engine)"
    )


def _auto(infos: list[EntryPointInfo]) -> tuple[SRTPlatform, PlatformDecision]:
    allow = allowed_plugins()
    cands: list[Candidate] = []
    active: list[tuple[EntryPointInfo, str]] = []
    for info in infos:
        if allow is not None and info.name not in allow:
            cands.append(_candidate(info, "filtered", "not in SGLANG_PLUGINS"))
            continue
        qualname = activate(info)
        if qualname is None:
            cands.append(_candidate(info, "inactive", "activate() returned None"))
        else:
            active.append((info, qualname))
            cands.append(_candidate(info, "active", qualname))
    if len(active) > 1:
        names = ", ".join(f"{i.name} ({i.dist})" for i, _ in active)
        raise PlatformSelectionError(
            f"{len(active)} platform plugins are active: {names}. Choose one with "
            f"{PLATFORM_ENV}=<name>, e.g. {PLATFORM_ENV}={active[0][0].name}."
        )
    if active:
        info, qualname = active[0]
        plat = instantiate(qualname, info)
        for c in cands:
            if c.name == info.name and c.dist == info.dist:
                c.status = "selected"
        return plat, PlatformDecision("auto: exactly one platform plugin active", qualname, info.name, info.dist, info.version, cands)
    plat, rule = _fallback()
    cls = type(plat)
    return plat, PlatformDecision(rule, f"{cls.__module__}.{cls.__qualname__}", candidates=cands)


def resolve_platform() -> tuple[SRTPlatform, PlatformDecision]:
    """Run the selection chain once; callers cache the result."""
    infos = list_entry_points(GROUP)
    name = os.environ.get(PLATFORM_ENV, "").strip()
    if name:
        return _explicit(name, infos)
    return _auto(infos)
