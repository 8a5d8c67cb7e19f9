"""Class, contract, hook and name checks of ``sglang plugins check`` (run in a fresh interpreter)."""

from __future__ import annotations

import inspect
from collections import Counter
from typing import Any

from sglang.cli.plugins.checks import GROUPS, PLATFORM_GROUPS, result

R = dict[str, str]


def _dist_entry_points(dist: str) -> list[Any]:
    from importlib.metadata import distribution

    return sorted((ep for ep in distribution(dist).entry_points if ep.group in GROUPS), key=lambda e: (e.group, e.name))


def check_names(dist: str, eps: list[Any]) -> list[R]:
    from sglang.multimodal_gen.runtime.platforms.builtin import BUILTINS
    from sglang.plugin_core.discovery import list_entry_points, normalize_dist_name

    me = normalize_dist_name(dist)
    out: list[R] = []
    for group in GROUPS:
        mine = [ep.name for ep in eps if ep.group == group]
        if not mine:
            continue
        problems = [f"{n!r} twice in this distribution" for n, c in sorted(Counter(mine).items()) if c > 1]
        problems += [
            f"{i.name!r} is also provided by {i.dist}"
            for i in list_entry_points(group)
            if i.name in mine and i.dist and normalize_dist_name(i.dist) != me
        ]
        if group == "sglang.multimodal_gen.platforms":
            problems += [f"{n!r} is the name of a built-in diffusion platform" for n in sorted(mine) if n.lower() in BUILTINS]
        out.append(result(f"{group}: entry-point names are unique", "FAIL" if problems else "PASS", "; ".join(problems) or ", ".join(mine)))
    return out


def _platform_base(group: str) -> tuple[type, Any, list[Any]]:
    if group == "sglang.srt.platforms":
        from sglang.srt.platforms.contract import SRT_CONTRACT
        from sglang.srt.platforms.device_mixin import DeviceMixin, PlatformEnum
        from sglang.srt.platforms.interface import SRTPlatform

        return SRTPlatform, PlatformEnum, [SRT_CONTRACT, (SRTPlatform, DeviceMixin)]
    from sglang.multimodal_gen.runtime.platforms.contract import DIFFUSION_CONTRACT
    from sglang.multimodal_gen.runtime.platforms.interface import Platform, PlatformEnum

    return Platform, PlatformEnum, [DIFFUSION_CONTRACT, (Platform,)]


def check_platform_class(label: str, group: str, qualname: str) -> list[R]:
    from sglang.plugin_core.contract import signature_problem
    from sglang.plugin_core.contract_table import method_default
    from sglang.plugin_core.discovery import import_qualname

    base, enum, (table, interfaces) = _platform_base(group)
    try:
        cls = import_qualname(qualname)
    except Exception as exc:
        return [result(f"{label}: {qualname} imports", "FAIL", f"{type(exc).__name__}: {exc}")]
    out = [result(f"{label}: {qualname} imports", "PASS")]
    if not (isinstance(cls, type) and issubclass(cls, base)):
        return [*out, result(f"{label}: subclasses {base.__module__}.{base.__name__}", "FAIL", f"{cls!r} does not")]
    out.append(result(f"{label}: subclasses {base.__module__}.{base.__name__}", "PASS"))
    out.append(result(f"{label}: declares PlatformEnum.OOT", "PASS" if cls._enum is enum.OOT else "FAIL", f"_enum = {cls._enum}"))
    for attr in ("device_name", "device_type"):
        v = getattr(cls, attr, None)
        good = isinstance(v, str) and v.strip() and v != "unknown"
        out.append(result(f"{label}: non-blank {attr}", "PASS" if good else "FAIL", repr(v)))
    try:
        cls()
        out.append(result(f"{label}: constructs without arguments", "PASS"))
    except Exception as exc:
        out.append(result(f"{label}: constructs without arguments", "FAIL", f"{type(exc).__name__}: {exc}"))
    owners = {k: c for c in interfaces for k in c.__dict__}
    for item in table:
        if item.status != "Active":
            continue
        iface = owners[item.name]
        base_attr = iface.__dict__[item.name]
        if not callable(base_attr):  # a declared value (capabilities): the vendor's must be of the same type
            value = getattr(cls, item.name)
            kind = type(base_attr)
            if value is not base_attr:
                good = isinstance(value, kind)
                out.append(result(f"{label}: Active {item.name}", "PASS" if good else "FAIL",
                                  f"{value!r}" if good else f"{value!r} is not a {kind.__module__}.{kind.__qualname__}"))
            continue
        impl_owner = next(k for k in cls.__mro__ if item.name in k.__dict__)
        check = f"{label}: Active {item.name}()"
        if impl_owner in interfaces:
            default = method_default(iface, item.name)
            if "NotImplementedError" in default:
                out.append(result(check, "FAIL", f"missing: {', '.join(item.called_by)} calls it and the default raises NotImplementedError"))
            else:
                out.append(result(check, "PASS", f"inherits the default ({default})"))
            continue
        problem = signature_problem(base_attr, impl_owner.__dict__[item.name])
        out.append(result(check, "FAIL" if problem else "PASS", problem or f"implemented by {impl_owner.__qualname__}{str(inspect.signature(getattr(cls, item.name))).replace(chr(39), '')}"))
    return out


def check_hooks(dist: str, eps: list[Any]) -> list[R]:
    from sglang.plugin_core.hooks.fit import hook_fit_problem
    from sglang.plugin_core.hooks.types import HookSource

    out: list[R] = []
    for ep in eps:
        if ep.group in PLATFORM_GROUPS:
            continue
        if ep.group == "sglang.srt.plugins":
            from sglang.srt.plugins.hook_registry import HookRegistry as registry
        else:
            from sglang.multimodal_gen.runtime.platforms.plugins import HookRegistry as registry
        label = f"{ep.group}:{ep.name}"
        src = HookSource(ep.name, dist, None)
        try:
            with registry.registering_as(src):
                ep.load()()
        except Exception as exc:
            out.append(result(f"{label}: callback runs and registers its hooks", "FAIL", f"{type(exc).__name__}: {exc}"))
            continue
        specs = [s for s in registry.registered() if s.source == src]
        out.append(result(f"{label}: callback runs and registers its hooks", "PASS", f"{len(specs)} hook(s)"))
        for s in specs:
            check = f"{label}: {s.type.name} {s.qualname} on {s.target}"
            try:
                res = registry.resolve(s.target, f"plugin {ep.name}")
            except Exception as exc:
                out.append(result(check, "FAIL", f"target does not resolve: {exc}"))
                continue
            problem = hook_fit_problem(s.type, s.fn, res.raw)
            out.append(result(check, "FAIL" if problem else "PASS", problem or "target resolves; parameters fit"))
    return out


def check_rest(dist: str, qualnames: dict[str, str]) -> list[R]:
    eps = _dist_entry_points(dist)
    out = check_names(dist, eps)
    for key, qualname in sorted(qualnames.items()):
        group = key.rsplit(":", 1)[0]
        out += check_platform_class(key, group, qualname)
    return out + check_hooks(dist, eps)
