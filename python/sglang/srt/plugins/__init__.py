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

from collections.abc import Callable
from typing import Any

from sglang.plugin_core.errors import PluginLoadError
from sglang.plugin_core.host import PluginHost
from sglang.plugin_core.records import PluginRecord
from sglang.srt.platforms import HOST as PLATFORMS
from sglang.srt.plugins.hook_registry import HookRegistry

PLUGIN_GROUP = "sglang.srt.plugins"
PLATFORM_GROUP = "sglang.srt.platforms"
SELECTOR_ENV = "SGLANG_PLATFORM"


def _host() -> PluginHost:
    """The SRT plugin host."""
    return _HOST


_HOST = PluginHost(PLATFORMS, HookRegistry)


def _get_excluded_dists() -> set[str]:
    """Distributions shipping a platform other than the selected one.

    Their general plugins are skipped so a non-selected vendor's dependencies
    are never imported. A distribution that also provides the selected
    platform is never excluded.
    """
    host = _host()
    return host.excluded_dists(host.platforms.selected_dist())


def load_plugins_by_group(group: str, excluded_dists: set[str] | frozenset[str] = frozenset(), required_dists: set[str] | frozenset[str] = frozenset()) -> dict[str, Callable[..., Any]]:
    """Load the allowed, non-excluded entry points of ``group``: ``{name: callable}``.

    The ``SGLANG_PLUGINS`` allow-list is applied by name before ``ep.load()``,
    so a filtered plugin's code never runs.
    """
    out: dict[str, Callable[..., Any]] = {}
    for info, _, fn in _host().load_group(group, excluded_dists, required_dists):
        out[info.name if info.name not in out else f"{info.name}@{info.dist}"] = fn
    return out


def load_plugins() -> None:
    """Discover, run and apply SRT general plugins; once per process, thread-safe.

    Called by every SRT entry point before server args are prepared and in
    each scheduler process before the ``Scheduler`` is built. A re-entrant call
    from a plugin callback returns at once; a failure is re-raised on every
    later call.
    """
    _host().apply_plugins()


def plugin_records() -> list[PluginRecord]:
    """What ``load_plugins()`` did with each entry point of ``sglang.srt.plugins``."""
    return _host().plugin_records()


def plugin_manifest() -> dict[str, Any]:
    """This process's SRT plugins and applied hook chains (reported at every handshake)."""
    return _host().plugin_manifest()


def format_plugin_report() -> str:
    return _host().format_plugin_report()


__all__ = [
    "PLUGIN_GROUP",
    "PluginLoadError",
    "format_plugin_report",
    "load_plugins",
    "load_plugins_by_group",
    "plugin_manifest",
    "plugin_records",
]
