"""The diffusion platform selection chain.

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
callback that raises aborts: never a silent fallback to a built-in.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from sglang.multimodal_gen import envs
from sglang.multimodal_gen.runtime.platforms.builtin import BUILTINS, OVERRIDE_ALIASES
from sglang.multimodal_gen.runtime.platforms.errors import (
    DiffusionPlatformActivationError,
    DiffusionPlatformClassError,
    DiffusionPlatformSelectionError,
)
from sglang.multimodal_gen.runtime.platforms.interface import Platform, PlatformEnum
from sglang.plugin_core.decision import Candidate, PlatformDecision

if TYPE_CHECKING:  # importlib.metadata is read only when entry points are (never for a built-in alias)
    from sglang.plugin_core.discovery import EntryPointInfo

GROUP = "sglang.multimodal_gen.platforms"
OVERRIDE_ENV = envs.SGLANG_DIFFUSION_PLATFORM_OVERRIDE


def activate(info: EntryPointInfo) -> str | None:
    try:
        fn = info.load()
    except Exception as exc:
        raise DiffusionPlatformActivationError(
            f"diffusion platform {info.label} failed to import: {type(exc).__name__}: {exc}. Start-up aborts "
            f"instead of falling back to a built-in; fix or uninstall {info.dist or 'the plugin'}."
        ) from exc
    if not callable(fn):
        raise DiffusionPlatformActivationError(f"diffusion platform {info.label} is not callable; it must name an activate function")
    try:
        qualname = fn()
    except Exception as exc:
        raise DiffusionPlatformActivationError(
            f"activation callback of diffusion platform {info.label} raised {type(exc).__name__}: {exc}. "
            f"Start-up aborts instead of falling back to a built-in; fix or uninstall {info.dist or 'the plugin'}."
        ) from exc
    if qualname is not None and (not isinstance(qualname, str) or not qualname.strip()):
        raise DiffusionPlatformActivationError(
            f"activation callback of diffusion platform {info.label} returned {qualname!r}; it must return the "
            "platform class's qualified name, or None when the hardware is absent"
        )
    return qualname


def _instantiate(qualname: str, info: EntryPointInfo) -> Platform:
    """Import, validate and construct an external class; nothing is published on failure."""
    from sglang.plugin_core.discovery import import_qualname

    where = info.label
    try:
        cls = import_qualname(qualname)
    except Exception as exc:
        raise DiffusionPlatformClassError(f"diffusion platform class {qualname!r} named by {where} does not import: {type(exc).__name__}: {exc}") from exc
    if not (isinstance(cls, type) and issubclass(cls, Platform)):
        raise DiffusionPlatformClassError(
            f"{qualname!r} named by {where} is not a subclass of sglang.multimodal_gen.runtime.platforms.Platform "
            "(an SRTPlatform cannot serve diffusion: define a separate class)"
        )
    if cls._enum is not PlatformEnum.OOT:
        raise DiffusionPlatformClassError(
            f"{qualname} named by {where} has _enum = {cls._enum}; an external diffusion platform must set "
            "_enum = PlatformEnum.OOT"
        )
    for attr in ("device_name", "device_type"):
        value = getattr(cls, attr, None)
        if not isinstance(value, str) or not value.strip():
            raise DiffusionPlatformClassError(f"{qualname} named by {where} must set a non-blank {attr} (got {value!r})")
    try:
        return cls()
    except Exception as exc:
        raise DiffusionPlatformClassError(
            f"{qualname} named by {where} must be constructible without arguments: {type(exc).__name__}: {exc}"
        ) from exc


def _builtin(name: str, rule: str, cands: list[Candidate] | None = None) -> tuple[Platform, PlatformDecision]:
    cls = BUILTINS[name][0]
    return cls(), PlatformDecision(rule, f"{cls.__module__}.{cls.__qualname__}", candidates=cands or [])


def _explicit(raw: str) -> tuple[Platform, PlatformDecision]:
    name = raw.strip()
    if name.lower() in OVERRIDE_ALIASES:
        return _builtin(name.lower(), f"override: {OVERRIDE_ENV}={raw} (built-in, not probed)")
    if name.lower() == "xpu":
        raise DiffusionPlatformSelectionError(
            f"{OVERRIDE_ENV}={raw!r}: XPU is selected automatically only and cannot be forced; unset {OVERRIDE_ENV} "
            f"on a machine with an XPU, or choose one of: {', '.join(OVERRIDE_ALIASES)}"
        )
    from sglang.plugin_core.discovery import list_entry_points

    infos = list_entry_points(GROUP)
    matches = [i for i in infos if i.name == name]
    if not matches:
        available = ", ".join(sorted({i.name for i in infos})) or "none installed"
        raise DiffusionPlatformSelectionError(
            f"{OVERRIDE_ENV}={raw!r} is neither a built-in ({', '.join(OVERRIDE_ALIASES)}) nor an installed "
            f"diffusion platform plugin (entry-point group {GROUP!r}: {available}); install the package that "
            f"provides it or unset {OVERRIDE_ENV}"
        )
    if len(matches) > 1:
        dists = ", ".join(str(m.dist) for m in matches)
        raise DiffusionPlatformSelectionError(f"{OVERRIDE_ENV}={name!r} is provided by several distributions ({dists}); uninstall all but one")
    info = matches[0]
    qualname = activate(info)
    if qualname is None:
        raise DiffusionPlatformSelectionError(
            f"diffusion platform {info.label} selected by {OVERRIDE_ENV} reports its hardware is not available "
            f"(its callback returned None); check the device and driver, or unset {OVERRIDE_ENV}"
        )
    plat = _instantiate(qualname, info)
    others = [Candidate(i.name, i.value, None, None, "not-probed", f"{OVERRIDE_ENV}={name}") for i in infos if i is not info]
    chosen = Candidate(info.name, info.value, info.dist, info.version, "selected", f"{OVERRIDE_ENV}={name}")
    return plat, PlatformDecision(f"override: {OVERRIDE_ENV}={name}", qualname, info.name, info.dist, info.version, [chosen, *others])


def _check_names(infos: list[EntryPointInfo]) -> None:
    dup = sorted(n for n, c in Counter(i.name for i in infos).items() if c > 1)
    if dup:
        where = "; ".join(f"{n}: " + ", ".join(f"{i.value} from {i.dist}" for i in infos if i.name == n) for n in dup)
        raise DiffusionPlatformSelectionError(
            f"duplicate diffusion platform entry-point names in {GROUP!r} ({where}); uninstall all but one provider of each"
        )
    clash = sorted(i.name for i in infos if i.name.lower() in BUILTINS)
    if clash:
        raise DiffusionPlatformSelectionError(
            f"diffusion platform entry point(s) {', '.join(map(repr, clash))} in {GROUP!r} reuse a built-in platform "
            f"name ({', '.join(BUILTINS)}); the plugin must register under its own name"
        )


def _auto() -> tuple[Platform, PlatformDecision]:
    from sglang.plugin_core.discovery import list_entry_points

    infos = list_entry_points(GROUP)
    _check_names(infos)
    cands: list[Candidate] = []
    active: list[tuple[EntryPointInfo, str]] = []
    for info in infos:
        qualname = activate(info)
        if qualname is None:
            cands.append(Candidate(info.name, info.value, info.dist, info.version, "inactive", "callback returned None"))
        else:
            active.append((info, qualname))
            cands.append(Candidate(info.name, info.value, info.dist, info.version, "active", qualname))
    if len(active) > 1:
        names = ", ".join(f"{i.name} ({i.dist})" for i, _ in active)
        raise DiffusionPlatformSelectionError(
            f"{len(active)} diffusion platform plugins are active: {names}. Choose one with "
            f"{OVERRIDE_ENV}=<name>, e.g. {OVERRIDE_ENV}={active[0][0].name}."
        )
    if active:
        info, qualname = active[0]
        plat = _instantiate(qualname, info)
        for c in cands:
            if c.name == info.name:
                c.status = "selected"
        return plat, PlatformDecision("auto: exactly one diffusion platform plugin active", qualname, info.name, info.dist, info.version, cands)
    for name, (_, detect) in BUILTINS.items():
        if detect():
            return _builtin(name, f"auto: no plugin active, built-in {name} detected", cands)
    raise AssertionError("the CPU detector always matches")


def resolve_platform() -> tuple[Platform, PlatformDecision]:
    """Run the chain once; the caller publishes the pair together."""
    raw = envs.platform_override()
    return _explicit(raw) if raw is not None else _auto()
