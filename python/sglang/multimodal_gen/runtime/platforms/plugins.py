"""Diffusion general plugins: the hook API, registration and the apply phase.

Import-safe (no torch, nothing of the runtime), so plugins and offline
scripts may import it at module scope::

    from sglang.multimodal_gen.runtime.platforms.plugins import HookType, plugin_hook

Hooks registered here apply to the diffusion runtime only; SRT has its own
registry. Two phases, each once per process behind a re-entrant lock (a
re-entrant call returns at once, other threads wait and inherit the outcome,
a failure is re-raised on every later call):

- :func:`load_plugins` discovers the ``sglang.multimodal_gen.plugins`` entry
  points and runs their callbacks, which *register* hooks; no target is
  resolved, so nothing of the runtime is imported;
- :func:`apply_plugin_hooks` registers if that has not happened, then resolves
  every target and patches it.

Plugins of the selected platform's distribution are part of its contract: a
load, callback or apply failure aborts. Others are best effort: a failing one
is logged and all its hooks are discarded. Plugins of every other installed
platform distribution are skipped. ``SGLANG_PLUGINS`` filters them all.
"""

from __future__ import annotations

from typing import Any

from sglang.multimodal_gen.runtime.platforms import HOST as _PLATFORMS
from sglang.plugin_core.errors import PluginLoadError
from sglang.plugin_core.hooks.registry import HookConflictWarning, HookFailure, HookRegistryBase
from sglang.plugin_core.hooks.types import NONE_RESULT, ChainEntry, HookSource, HookSpec, HookType, PluginSource
from sglang.plugin_core.host import PluginHost
from sglang.plugin_core.records import PluginRecord

PLUGIN_GROUP = _PLATFORMS.runtime.plugin_group
PLATFORM_GROUP = _PLATFORMS.runtime.platform_group
SELECTOR_ENV = _PLATFORMS.runtime.selector_env


class HookRegistry(HookRegistryBase, runtime="diffusion", selector_env=SELECTOR_ENV):
    """The diffusion process-local hook registry (separate state from SRT's)."""


plugin_hook = HookRegistry.hook  # decorator form of HookRegistry.register; returns what it decorates

_HOST = PluginHost(_PLATFORMS, HookRegistry)


def selected_platform_dist() -> str | None:
    """The distribution that provided the selected diffusion platform (``None``: a built-in)."""
    return _PLATFORMS.selected_dist()


def load_plugins() -> None:
    """Run every allowed diffusion plugin callback (registration only); once per process."""
    _HOST.register_plugins()


def apply_plugin_hooks() -> None:
    """Register if needed, then resolve and patch every hook target; once per process."""
    _HOST.apply_plugins()


def plugins_registered() -> bool:
    return _HOST.register_once.done


def hooks_applied() -> bool:
    return _HOST.apply_once.done


def plugin_records() -> list[PluginRecord]:
    """What :func:`load_plugins` did with each entry point of ``sglang.multimodal_gen.plugins``."""
    return _HOST.plugin_records()


def format_plugin_report() -> str:
    return _HOST.format_plugin_report()


def plugin_manifest() -> dict[str, Any]:
    """Plugins and applied hook chains of this process (reported at every handshake)."""
    return _HOST.plugin_manifest()


__all__ = [
    "NONE_RESULT",
    "ChainEntry",
    "HookConflictWarning",
    "HookFailure",
    "HookRegistry",
    "HookSource",
    "HookSpec",
    "HookType",
    "PluginLoadError",
    "PluginSource",
    "apply_plugin_hooks",
    "format_plugin_report",
    "load_plugins",
    "plugin_hook",
    "plugin_records",
]
