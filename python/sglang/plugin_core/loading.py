"""The general-plugin loading steps both runtimes share.

A runtime's loader lists one entry-point group, filters it (``SGLANG_PLUGINS``
by name before ``ep.load()``, then distributions of non-selected platforms),
runs each callback with the plugin's source set so its hooks are attributed,
and applies the registry. Failure rules: a plugin of a *required*
distribution (the selected platform's, or any under ``SGLANG_PLUGINS_STRICT=1``)
aborts with :class:`PluginLoadError`; any other is logged and every hook it
registered is discarded.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from sglang.plugin_core.discovery import EntryPointInfo, allowed_plugins, list_entry_points, strict_mode
from sglang.plugin_core.errors import PluginLoadError
from sglang.plugin_core.hooks.registry import HookFailure, HookRegistryBase
from sglang.plugin_core.hooks.types import HookSource
from sglang.plugin_core.records import PluginRecord

logger = logging.getLogger(__name__)

Loaded = list[tuple[EntryPointInfo, PluginRecord, Callable[..., Any]]]


def is_required(dist: str | None, required_dists: set[str] | frozenset[str]) -> bool:
    return strict_mode() or (dist is not None and dist in required_dists)


def fail(rec: PluginRecord, phase: str, exc: BaseException, selector_env: str) -> None:
    """Record a failure; raise when the plugin is required, else log it."""
    rec.status, rec.reason = "failed", f"{phase}: {type(exc).__name__}: {exc}"
    label = f"plugin {rec.name!r} ({rec.value}) from {rec.dist or 'no distribution'}"
    if rec.required:
        why = "it ships with the selected platform" if not strict_mode() else "SGLANG_PLUGINS_STRICT=1 is set"
        raise PluginLoadError(
            f"{label} failed to {phase}: {type(exc).__name__}: {exc}. Start-up aborts because {why}; "
            f"fix or reinstall {rec.dist or 'the plugin'}, leave it out with SGLANG_PLUGINS, or choose another "
            f"platform with {selector_env}."
        ) from exc
    logger.error("%s failed to %s: %s: %s; it is skipped and its hooks are discarded", label, phase, type(exc).__name__, exc, exc_info=exc)


def load_group(
    group: str,
    excluded_dists: set[str] | frozenset[str],
    required_dists: set[str] | frozenset[str],
    records: list[PluginRecord],
    selector_env: str,
) -> Loaded:
    """Import the allowed, non-excluded entry points of ``group``, recording each outcome."""
    allow = allowed_plugins()
    out: Loaded = []
    for info in list_entry_points(group):
        rec = PluginRecord.of(info)
        rec.required = is_required(info.dist, required_dists)
        records.append(rec)
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
            fail(rec, "load", exc, selector_env)
            continue
        out.append((info, rec, fn))
    return out


def run_callbacks(registry: type[HookRegistryBase], loaded: Loaded, selector_env: str) -> dict[HookSource, PluginRecord]:
    """Call each plugin's callback with its source set; a failed optional plugin loses its hooks."""
    sources: dict[HookSource, PluginRecord] = {}
    for info, rec, fn in loaded:
        src = HookSource(info.name, info.dist, info.version)
        try:
            with registry.registering_as(src):
                fn()
        except Exception as exc:
            registry.discard(src, f"its plugin's callback raised {type(exc).__name__}: {exc}")
            fail(rec, "run its callback", exc, selector_env)
            continue
        rec.status = "registered"
        sources[src] = rec
    return sources


def apply_registry(registry: type[HookRegistryBase], sources: dict[HookSource, PluginRecord], selector_env: str, runtime: str) -> None:
    """Patch every target; attribute failures to plugin records and list each plugin's hooks."""

    def on_failure(failure: HookFailure) -> None:
        for src in failure.sources:
            if src in sources:
                fail(sources[src], f"apply its hooks on {failure.target!r}", failure.error, selector_env)

    must = {s.dist for s, r in sources.items() if r.required and s.dist}
    registry.apply_hooks(required_dists=must, on_failure=on_failure)
    waiting = {id(s) for s, _ in registry.pending()}
    for src, rec in sources.items():
        rec.hooks = [f"{h.type.name} {h.target} -> {h.qualname}" + (" (pending: the target does not resolve yet)" if id(h) in waiting else "")
                     for h in registry.registered() if h.source == src]
        if rec.status == "registered":
            rec.status = "loaded"
            logger.info("loaded %s plugin %s from %s (%d hooks)", runtime, src.name, src.dist or "no distribution", len(rec.hooks))


def excluded_for(platform_group: str, selected: str | None) -> set[str]:
    """Distributions that ship a platform of ``platform_group`` other than ``selected``'s."""
    return {i.dist for i in list_entry_points(platform_group) if i.dist and i.dist != selected}
