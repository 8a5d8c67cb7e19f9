"""The platform selection chain, once for every runtime.

Selector variable set (``Runtime.selector_env``)::

    a built-in alias              -> that built-in, not probed, no entry point read
    a refused name                -> selection error with the reason
    no entry point of that name   -> selection error listing what is installed
    activate() returns a name     -> that platform
    activate() returns None       -> unavailable error (no hardware)

Unset (auto-discovery)::

    0 active -> Runtime.fallback() (built-in detection)
    1 active -> it
    N active -> selection error (set the selector)

A plugin that fails to import, raises, returns a non-string, or names a class
that does not import or breaks the contract aborts selection with an error
naming the entry point and its distribution: never a silent fallback.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import TYPE_CHECKING

from sglang.plugin_core.decision import Candidate, PlatformDecision
from sglang.plugin_core.runtime import Runtime

if TYPE_CHECKING:  # importlib.metadata is read only when entry points are (never for a built-in alias)
    from sglang.plugin_core.discovery import EntryPointInfo


def _candidate(info: EntryPointInfo, status: str, reason: str = "") -> Candidate:
    return Candidate(info.name, info.value, info.dist, info.version, status, reason)


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


class SelectionChain:
    """Selection of one runtime's platform; stateless, so callers cache the outcome."""

    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime

    def activate(self, info: EntryPointInfo) -> str | None:
        """Import and call one entry point's activation callback; its class name, or ``None``."""
        rt, err = self.rt, self.rt.errors.activation
        fix = f"fix or uninstall {info.dist or 'the plugin'}"
        try:
            fn = info.load()
        except Exception as exc:
            raise err(f"{rt.noun} {info.label} failed to import: {type(exc).__name__}: {exc}. Start-up aborts instead of falling back to a built-in; {fix}.") from exc
        if not callable(fn):
            raise err(f"{rt.noun} {info.label} is not callable; it must name an activate() function")
        try:
            qualname = fn()
        except Exception as exc:
            raise err(f"activate() of {rt.noun} {info.label} raised {type(exc).__name__}: {exc}. Start-up aborts instead of falling back to a built-in; {fix}.") from exc
        if qualname is not None and (not isinstance(qualname, str) or not qualname.strip()):
            raise err(
                f"activate() of {rt.noun} {info.label} returned {type(qualname).__name__} {qualname!r}; it must return "
                "the platform class's qualified name as a string, or None when the hardware is absent"
            )
        return qualname

    def instantiate(self, qualname: str, info: EntryPointInfo | None) -> object:
        """Import ``qualname`` (``a.b.C`` or ``a.b:C``), check it against the contract, construct it."""
        from sglang.plugin_core.discovery import import_qualname

        rt, err = self.rt, self.rt.errors.class_
        where = info.label if info else "built-in"
        try:
            cls = import_qualname(qualname)
        except Exception as exc:
            raise err(f"{rt.noun} class {qualname!r} named by {where} does not import: {type(exc).__name__}: {exc}") from exc
        if not (isinstance(cls, type) and issubclass(cls, rt.base)):
            raise err(f"{qualname!r} named by {where} is not a subclass of {rt.base_path}")
        problem = rt.check_class(cls) if rt.check_class else None
        if problem:
            raise err(f"{qualname} named by {where} {problem}")
        try:
            return cls()
        except Exception as exc:
            raise err(f"{qualname} named by {where} must be constructible without arguments: {type(exc).__name__}: {exc}") from exc

    def resolve(self) -> tuple[object, PlatformDecision]:
        """Run the chain once: the platform and the record of why."""
        raw = os.environ.get(self.rt.selector_env, "").strip()
        return self._explicit(raw) if raw else self._auto()

    # -- the two branches ---------------------------------------------------

    def _builtin(self, cls: type, rule: str, cands: list[Candidate] | None = None) -> tuple[object, PlatformDecision]:
        return cls(), PlatformDecision(rule, _qualname(cls), candidates=cands or [])

    def _explicit(self, raw: str) -> tuple[object, PlatformDecision]:
        rt, env = self.rt, self.rt.selector_env
        if raw.lower() in rt.override_aliases:
            return self._builtin(rt.builtins()[raw.lower()], f"{rt.selector_rule}: {env}={raw} (built-in, not probed)")
        if raw.lower() in rt.refused:
            raise rt.errors.selection(f"{env}={raw!r}: {rt.refused[raw.lower()]}")
        from sglang.plugin_core.discovery import list_entry_points

        infos = list_entry_points(rt.platform_group)
        matches = [i for i in infos if i.name == raw]
        if not matches:
            available = ", ".join(sorted({i.name for i in infos})) or "none"
            what = (f"is neither a built-in ({', '.join(rt.override_aliases)}) nor an installed {rt.noun} plugin"
                    if rt.override_aliases else f"matches no installed {rt.noun} plugin")
            raise rt.errors.selection(
                f"{env}={raw!r} {what} (entry-point group {rt.platform_group!r}; available: {available}). "
                f"Install the package that provides {raw!r} "
                f"(pip install <package>), or unset {env} to auto-detect."
            )
        if len(matches) > 1:
            dists = ", ".join(str(m.dist) for m in matches)
            raise rt.errors.selection(f"{env}={raw!r} is provided by several distributions ({dists}); uninstall all but one")
        info = matches[0]
        qualname = self.activate(info)
        if qualname is None:
            raise rt.errors.unavailable(
                f"{rt.noun} {info.label} selected by {env} reports its hardware is not available "
                f"(activate() returned None). Check the device and its driver, or unset {env}."
            )
        plat = self.instantiate(qualname, info)
        # the others are listed by name only: reading their metadata would cost one file each
        others = [Candidate(i.name, i.value, None, None, "not-probed", f"{env}={raw}") for i in infos if i is not info]
        chosen = _candidate(info, "selected", f"{env}={raw}")
        rule = f"{rt.selector_rule}: {env}={raw}"
        return plat, PlatformDecision(rule, qualname, info.name, info.dist, info.version, [chosen, *others])

    def _check_names(self, infos: list[EntryPointInfo]) -> None:
        rt = self.rt
        dup = sorted(n for n, c in Counter(i.name for i in infos).items() if c > 1)
        if dup:
            where = "; ".join(f"{n}: " + ", ".join(f"{i.value} from {i.dist}" for i in infos if i.name == n) for n in dup)
            raise rt.errors.selection(f"duplicate {rt.noun} entry-point names in {rt.platform_group!r} ({where}); uninstall all but one provider of each")
        names = set(rt.override_aliases) | set(rt.refused)
        clash = sorted(i.name for i in infos if i.name.lower() in names)
        if clash:
            raise rt.errors.selection(
                f"{rt.noun} entry point(s) {', '.join(map(repr, clash))} in {rt.platform_group!r} reuse a built-in "
                f"platform name ({', '.join(sorted(names))}); the plugin must register under its own name"
            )

    def _auto(self) -> tuple[object, PlatformDecision]:
        from sglang.plugin_core.discovery import PLUGINS_ENV, allowed_plugins, list_entry_points

        rt = self.rt
        infos = list_entry_points(rt.platform_group)
        if rt.strict_names:
            self._check_names(infos)
        allow = allowed_plugins() if rt.filter_platforms else None
        cands: list[Candidate] = []
        active: list[tuple[EntryPointInfo, str]] = []
        for info in infos:
            if allow is not None and info.name not in allow:
                cands.append(_candidate(info, "filtered", f"not in {PLUGINS_ENV}"))
                continue
            qualname = self.activate(info)
            if qualname is None:
                cands.append(_candidate(info, "inactive", "activate() returned None"))
            else:
                active.append((info, qualname))
                cands.append(_candidate(info, "active", qualname))
        if len(active) > 1:
            names = ", ".join(f"{i.name} ({i.dist})" for i, _ in active)
            raise rt.errors.selection(
                f"{len(active)} {rt.noun} plugins are active: {names}. Choose one with "
                f"{rt.selector_env}=<name>, e.g. {rt.selector_env}={active[0][0].name}."
            )
        if active:
            info, qualname = active[0]
            plat = self.instantiate(qualname, info)
            for c in cands:
                if c.name == info.name and c.dist == info.dist:
                    c.status = "selected"
            rule = f"auto: exactly one {rt.noun} plugin active"
            return plat, PlatformDecision(rule, qualname, info.name, info.dist, info.version, cands)
        cls, rule = rt.fallback()
        return self._builtin(cls, rule, cands)
