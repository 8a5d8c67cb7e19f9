"""The diffusion runtime's declaration for the shared selection chain.

``SGLANG_DIFFUSION_PLATFORM_OVERRIDE``:

- a built-in alias (cpu, cuda, rocm, mps, npu, musa; any case) selects that
  built-in without probing hardware and without reading entry points;
- ``xpu`` is refused: XPU is selected automatically only;
- any other name loads only the ``sglang.multimodal_gen.platforms`` entry point
  of exactly that name; no such entry point, or ``activate()`` returning
  ``None``, is an error.

Unset: duplicate entry-point names and names equal to a built-in are rejected
before anything is imported; then every callback runs. 0 active -> built-in
detection (MPS, XPU, ROCm, CUDA, NPU, MUSA, CPU); 1 -> it; more -> error. A
callback that raises aborts: never a silent fallback to a built-in. The chain
itself is :class:`sglang.plugin_core.selection.SelectionChain`.
"""

from __future__ import annotations

from collections.abc import Mapping

from sglang.multimodal_gen import envs
from sglang.multimodal_gen.runtime.platforms.errors import (
    BackendInitError,
    DiffusionPlatformActivationError,
    DiffusionPlatformClassError,
    DiffusionPlatformSelectionError,
    DiffusionPlatformUnavailableError,
)
from sglang.multimodal_gen.runtime.platforms.interface import Platform, PlatformEnum
from sglang.plugin_core.decision import PlatformDecision
from sglang.plugin_core.runtime import Runtime, SelectionErrors
from sglang.plugin_core.selection import SelectionChain

GROUP = "sglang.multimodal_gen.platforms"
PLUGIN_GROUP = "sglang.multimodal_gen.plugins"
OVERRIDE_ENV = envs.SGLANG_DIFFUSION_PLATFORM_OVERRIDE
# Names the override variable may select without probing (xpu stays automatic only).
OVERRIDE_ALIASES = ("cpu", "cuda", "rocm", "mps", "npu", "musa")


def _builtins() -> Mapping[str, type]:
    from sglang.multimodal_gen.runtime.platforms.builtin import BUILTINS

    return {name: cls for name, (cls, _) in BUILTINS.items()}


def fallback() -> tuple[type[Platform], str]:
    """Built-in detection in the spec's order; CPU always matches."""
    from sglang.multimodal_gen.runtime.platforms.builtin import BUILTINS

    for name, (cls, detect) in BUILTINS.items():
        if detect():
            return cls, f"auto: no plugin active, built-in {name} detected"
    raise AssertionError("the CPU detector always matches")


def check_class(cls: type) -> str | None:
    """The diffusion-only rules for an external platform class."""
    if getattr(cls, "_enum", None) is not PlatformEnum.OOT:
        return f"has _enum = {getattr(cls, '_enum', None)}; an external diffusion platform must set _enum = PlatformEnum.OOT"
    for attr in ("device_name", "device_type"):
        value = getattr(cls, attr, None)
        if not isinstance(value, str) or not value.strip():
            return f"must set a non-blank {attr} (got {value!r})"
    return None


RUNTIME = Runtime(
    name="diffusion",
    noun="diffusion platform",
    platform_group=GROUP,
    plugin_group=PLUGIN_GROUP,
    selector_env=OVERRIDE_ENV,
    base=Platform,
    base_path="sglang.multimodal_gen.runtime.platforms.Platform (an SRTPlatform cannot serve diffusion: define a separate class)",
    errors=SelectionErrors(
        DiffusionPlatformSelectionError,
        DiffusionPlatformActivationError,
        DiffusionPlatformClassError,
        DiffusionPlatformUnavailableError,
        BackendInitError,
    ),
    fallback=fallback,
    builtins=_builtins,
    override_aliases=OVERRIDE_ALIASES,
    refused={"xpu": f"XPU is selected automatically only and cannot be forced; unset {OVERRIDE_ENV} on a machine with an XPU, or choose one of: {', '.join(OVERRIDE_ALIASES)}"},
    selector_rule="override",
    filter_platforms=False,
    strict_names=True,
    check_class=check_class,
)

CHAIN = SelectionChain(RUNTIME)


def resolve_platform() -> tuple[Platform, PlatformDecision]:
    """Run the chain once; the caller publishes the pair together."""
    plat, decision = CHAIN.resolve()
    assert isinstance(plat, Platform)
    return plat, decision
