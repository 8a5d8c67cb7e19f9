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

from sglang.plugin_core.discovery import list_entry_points
from sglang.plugin_core.errors import PluginLoadError
from sglang.plugin_core.loading import apply_registry, excluded_for, load_group, run_callbacks
from sglang.plugin_core.once import OncePerProcess
from sglang.plugin_core.records import PluginRecord, format_records
from sglang.srt.plugins.hook_registry import HookRegistry

logger = logging.getLogger(__name__)

PLUGIN_GROUP = "sglang.srt.plugins"
PLATFORM_GROUP = "sglang.srt.platforms"
SELECTOR_ENV = "SGLANG_PLATFORM"


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
    return excluded_for(PLATFORM_GROUP, selected)


def load_plugins_by_group(group: str, excluded_dists: set[str] | frozenset[str] = frozenset(), required_dists: set[str] | frozenset[str] = frozenset()) -> dict[str, Callable[..., Any]]:
    """Load the allowed, non-excluded entry points of ``group``: ``{name: callable}``.

    The ``SGLANG_PLUGINS`` allow-list is applied by name before ``ep.load()``,
    so a filtered plugin's code never runs.
    """
    out: dict[str, Callable[..., Any]] = {}
    for info, _, fn in load_group(group, excluded_dists, required_dists, _LoaderState.records, SELECTOR_ENV):
        out[info.name if info.name not in out else f"{info.name}@{info.dist}"] = fn
    return out


def _load_plugins_impl() -> None:
    selected = _selected_platform_dist()
    excluded = _excluded_for(selected)
    required = {selected} if selected else set()
    loaded = load_group(PLUGIN_GROUP, excluded, required, _LoaderState.records, SELECTOR_ENV)
    sources = run_callbacks(HookRegistry, loaded, SELECTOR_ENV)
    apply_registry(HookRegistry, sources, SELECTOR_ENV, "SRT")


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


def plugin_manifest() -> dict[str, Any]:
    """This process's SRT plugins and applied hook chains (reported at every handshake)."""
    from sglang.plugin_core.manifest import build_manifest

    return build_manifest(plugin_records(), HookRegistry)


def format_plugin_report() -> str:
    return format_records(f"SRT general plugins ({PLUGIN_GROUP})", plugin_records())


__all__ = [
    "PLUGIN_GROUP",
    "PluginLoadError",
    "format_plugin_report",
    "load_plugins",
    "load_plugins_by_group",
    "plugin_manifest",
    "plugin_records",
]
