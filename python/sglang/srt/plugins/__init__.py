"""SRT general plugins: ``load_plugins()`` discovers, runs and applies them.

Flow (once per process, behind a lock)::

    load_plugins()
    ├── _get_excluded_dists()          distributions of non-selected platforms
    ├── load_plugins_by_group("sglang.srt.plugins", excluded_dists=...)
    │                                  SGLANG_PLUGINS filters by name before ep.load()
    ├── for each plugin (sorted by name, then distribution):
    │       _current_plugin_source = (name, dist); callback()   registers hooks
    └── HookRegistry.apply_hooks()     patches the targets

Failure rules: a plugin shipped by the selected platform's distribution is part
of that platform's contract, so failing to load, run or apply its hooks aborts
start-up with :class:`PluginLoadError`. Any other plugin is best-effort: its
failure is logged with the traceback and every hook it registered is
discarded. ``SGLANG_PLUGINS_STRICT=1`` makes every failure abort.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from sglang.plugin_core.discovery import EntryPointInfo, allowed_plugins, list_entry_points, strict_mode
from sglang.plugin_core.errors import PluginLoadError
from sglang.plugin_core.hooks.registry import HookFailure
from sglang.plugin_core.hooks.types import PluginSource
from sglang.plugin_core.once import OncePerProcess
from sglang.plugin_core.records import PluginRecord, format_records
from sglang.srt.plugins.hook_registry import HookRegistry, _current_plugin_source

logger = logging.getLogger(__name__)

PLUGIN_GROUP = "sglang.srt.plugins"
PLATFORM_GROUP = "sglang.srt.platforms"


class _LoaderState:
    records: list[PluginRecord] = []


def _selected_platform_dist() -> str | None:
    """The distribution of the selected platform plugin (``None`` for a built-in).

    With ``SGLANG_PLATFORM`` set this reads entry-point metadata only; in
    auto-discovery it resolves ``current_platform`` (which would happen at the
    first ``ServerArgs`` anyway) and reads the decision.
    """
    name = os.environ.get("SGLANG_PLATFORM", "").strip()
    if name:
        dists = {i.dist for i in list_entry_points(PLATFORM_GROUP) if i.name == name}
        return next(iter(dists)) if len(dists) == 1 else None
    from sglang.srt.platforms import get_platform_decision

    return get_platform_decision().dist


def _get_excluded_dists() -> set[str]:
    """Distributions shipping a platform other than the selected one.

    Their general plugins are skipped so a non-selected vendor's dependencies
    are never imported. A distribution that also provides the selected
    platform is never excluded.
    """
    return _excluded_for(_selected_platform_dist())


def _excluded_for(selected: str | None) -> set[str]:
    return {i.dist for i in list_entry_points(PLATFORM_GROUP) if i.dist and i.dist != selected}


def _is_required(dist: str | None, required_dists: set[str] | frozenset[str]) -> bool:
    return strict_mode() or (dist is not None and dist in required_dists)


def _fail(rec: PluginRecord, phase: str, exc: BaseException) -> None:
    rec.status, rec.reason = "failed", f"{phase}: {type(exc).__name__}: {exc}"
    label = f"plugin {rec.name!r} ({rec.value}) from {rec.dist or 'no distribution'}"
    if rec.required:
        why = "it ships with the selected platform" if not strict_mode() else "SGLANG_PLUGINS_STRICT=1 is set"
        raise PluginLoadError(
            f"{label} failed to {phase}: {type(exc).__name__}: {exc}. Start-up aborts because {why}; "
            f"fix or reinstall {rec.dist or 'the plugin'}, or leave it out with SGLANG_PLUGINS."
        ) from exc
    logger.error("%s failed to %s: %s: %s; it is skipped and its hooks are discarded", label, phase, type(exc).__name__, exc, exc_info=exc)


def _load_group(group: str, excluded_dists: set[str] | frozenset[str], required_dists: set[str] | frozenset[str]) -> list[tuple[EntryPointInfo, PluginRecord, Callable[..., Any]]]:
    allow = allowed_plugins()
    out = []
    for info in list_entry_points(group):
        rec = PluginRecord.of(info)
        rec.required = _is_required(info.dist, required_dists)
        _LoaderState.records.append(rec)
        if allow is not None and info.name not in allow:
            rec.status, rec.reason = "filtered", "not in SGLANG_PLUGINS"
            continue
        if info.dist in excluded_dists:
            rec.status, rec.reason = "excluded", "its distribution ships a platform that is not selected"
            continue
        try:
            fn = info.load()
            if not callable(fn):
                raise TypeError(f"entry point {info.value!r} is a {type(fn).__name__}, not a callable")
        except Exception as exc:
            _fail(rec, "load", exc)
            continue
        out.append((info, rec, fn))
    return out


def load_plugins_by_group(group: str, excluded_dists: set[str] | frozenset[str] = frozenset(), required_dists: set[str] | frozenset[str] = frozenset()) -> dict[str, Callable[..., Any]]:
    """Load the allowed, non-excluded entry points of ``group``: ``{name: callable}``.

    The ``SGLANG_PLUGINS`` allow-list is applied by name before ``ep.load()``,
    so a filtered plugin's code never runs.
    """
    out: dict[str, Callable[..., Any]] = {}
    for info, _, fn in _load_group(group, excluded_dists, required_dists):
        out[info.name if info.name not in out else f"{info.name}@{info.dist}"] = fn
    return out


def _load_plugins_impl() -> None:
    selected = _selected_platform_dist()
    excluded = _excluded_for(selected)
    required = {selected} if selected else set()
    sources: dict[PluginSource, PluginRecord] = {}
    for info, rec, fn in _load_group(PLUGIN_GROUP, excluded, required):
        src = PluginSource(info.name, info.dist, info.version)
        token = _current_plugin_source.set(src)
        try:
            fn()
        except Exception as exc:
            HookRegistry.discard(src)
            _fail(rec, "run its callback", exc)
            continue
        finally:
            _current_plugin_source.reset(token)
        rec.status = "loaded"
        sources[src] = rec

    def on_failure(failure: HookFailure) -> None:
        for src in failure.sources:
            if src in sources:
                _fail(sources[src], f"apply its hooks on {failure.target!r}", failure.error)

    must = {s.dist for s, r in sources.items() if r.required and s.dist}
    HookRegistry.apply_hooks(required_dists=must, on_failure=on_failure)
    for src, rec in sources.items():
        rec.hooks = [f"{h.type.name} {h.target} -> {h.qualname}" for h in HookRegistry.registered() if h.source == src]
        if rec.status == "loaded":
            logger.info("loaded SRT plugin %s from %s (%d hooks)", src.name, src.dist or "no distribution", len(rec.hooks))


_LOAD_ONCE = OncePerProcess("SRT plugin loading (sglang.srt.plugins.load_plugins)", _load_plugins_impl)


def load_plugins() -> None:
    """Discover, run and apply SRT general plugins; once per process, thread-safe.

    Called by every SRT entry point before server args are prepared and in
    each scheduler process before the ``Scheduler`` is built. A re-entrant call
    from a plugin callback returns at once; a failure is re-raised on every
    later call.
    """
    _LOAD_ONCE()


def plugin_records() -> list[PluginRecord]:
    """What ``load_plugins()`` did with each entry point of ``sglang.srt.plugins``."""
    return list(_LoaderState.records)


def format_plugin_report() -> str:
    return format_records(f"SRT general plugins ({PLUGIN_GROUP})", plugin_records())


__all__ = [
    "PLUGIN_GROUP",
    "PluginLoadError",
    "format_plugin_report",
    "load_plugins",
    "load_plugins_by_group",
    "plugin_records",
]
