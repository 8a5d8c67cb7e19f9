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

import importlib.util
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


def torch_build_backends() -> frozenset[str] | None:
    """The accelerator backends the installed torch was built for (``cuda``, ``hip``, ``xpu``), read from its
    ``torch/version.py`` without importing torch; ``None`` when torch is missing or the file is unreadable."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return built_backends(os.path.join(next(iter(spec.submodule_search_locations)), "version.py"))


def built_backends(version_py: str) -> frozenset[str] | None:
    """The fields ``cuda``, ``hip`` and ``xpu`` that a torch ``version.py`` at ``version_py`` sets to a non-empty
    constant (a CPU wheel sets all three to ``None``); ``None`` when the file cannot be read or parsed, or does not
    assign all three (an older torch, which the caller then imports and asks)."""
    import ast

    try:
        with open(version_py, encoding="utf-8") as f:
            tree = ast.parse(f.read(), version_py)
    except (OSError, SyntaxError, ValueError):
        return None
    built, named = set(), set()
    for node in tree.body:
        if isinstance(node, ast.AnnAssign):
            targets, value = [node.target], node.value
        elif isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        else:
            continue
        for t in targets:
            if isinstance(t, ast.Name) and t.id in ("cuda", "hip", "xpu"):
                named.add(t.id)
                if not isinstance(value, ast.Constant) or value.value:  # anything but a falsy constant: a build
                    built.add(t.id)
    return frozenset(built) if len(named) == 3 else None


def accelerator_device() -> tuple[str, str] | None:
    """``("cuda", "CUDA")``, ``("cuda", "ROCm")`` or ``("xpu", "XPU")`` when torch sees such a device, else ``None``.
    The one answer to "is there an accelerator" for the ``--device auto`` rule and :func:`fallback`. A torch built for
    none of them (the CPU wheel) answers without importing torch: about 2 s of a launcher's start-up on a 2-core host."""
    if torch_build_backends() == frozenset():
        return None
    try:
        import torch
    except ImportError:
        return None
    if torch.cuda.is_available():
        return ("cuda", "ROCm") if getattr(torch.version, "hip", None) else ("cuda", "CUDA")
    if hasattr(torch, "xpu") and torch.xpu.is_available():
        return "xpu", "XPU"
    return None


def fallback() -> tuple[type[SRTPlatform], str]:
    """The built-in platform when no plugin is active, with the rule that chose it."""
    if _truthy(os.environ.get(CPU_ENGINE_ENV)):
        from sglang.srt.platforms.cpu import CpuSRTPlatform

        return CpuSRTPlatform, os.environ.get(CPU_ENGINE_RULE_ENV) or f"fallback: {CPU_ENGINE_ENV}=1"
    if importlib.util.find_spec("torch") is None:
        return SRTPlatform, "fallback: torch is not installed, base SRTPlatform"
    found = accelerator_device()
    if found == ("cuda", "ROCm"):
        from sglang.srt.platforms.cuda import RocmSRTPlatform

        return RocmSRTPlatform, "fallback: ROCm available"
    if found == ("cuda", "CUDA"):
        from sglang.srt.platforms.cuda import CudaSRTPlatform

        return CudaSRTPlatform, "fallback: CUDA available"
    if found == ("xpu", "XPU"):
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
