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

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from sglang.plugin_core.errors import PluginLoadError
from sglang.plugin_core.hooks.registry import HookConflictWarning, HookFailure, HookRegistryBase
from sglang.plugin_core.hooks.types import NONE_RESULT, ChainEntry, HookSpec, HookType, PluginSource
from sglang.plugin_core.loading import apply_registry, excluded_for, load_group, run_callbacks
from sglang.plugin_core.once import OncePerProcess
from sglang.plugin_core.records import PluginRecord, format_records

logger = logging.getLogger(__name__)

PLUGIN_GROUP = "sglang.multimodal_gen.plugins"
PLATFORM_GROUP = "sglang.multimodal_gen.platforms"
SELECTOR_ENV = "SGLANG_DIFFUSION_PLATFORM_OVERRIDE"

F = TypeVar("F", bound=Callable[..., Any])


class HookRegistry(HookRegistryBase, runtime="diffusion", selector_env=SELECTOR_ENV):
    """The diffusion process-local hook registry (separate state from SRT's)."""


def plugin_hook(target: str, type: HookType | str = HookType.AROUND) -> Callable[[F], F]:
    """Decorator form of :meth:`HookRegistry.register`; returns the function or class unchanged."""
    return HookRegistry.hook(target, type)


class _State:
    records: list[PluginRecord] = []
    sources: dict[PluginSource, PluginRecord] = {}


def selected_platform_dist() -> str | None:
    """The distribution that provided the selected diffusion platform (``None``: a built-in)."""
    from sglang.multimodal_gen.runtime.platforms import get_platform_decision

    return get_platform_decision().dist


def _register() -> None:
    selected = selected_platform_dist()
    excluded = excluded_for(PLATFORM_GROUP, selected)
    required = {selected} if selected else set()
    loaded = load_group(PLUGIN_GROUP, excluded, required, _State.records, SELECTOR_ENV)
    _State.sources = run_callbacks(HookRegistry, loaded, SELECTOR_ENV)


def _apply() -> None:
    load_plugins()
    apply_registry(HookRegistry, _State.sources, SELECTOR_ENV, "diffusion")


_REGISTER_ONCE = OncePerProcess("diffusion plugin registration (load_plugins)", _register)
_APPLY_ONCE = OncePerProcess("diffusion hook application (apply_plugin_hooks)", _apply)


def load_plugins() -> None:
    """Run every allowed diffusion plugin callback (registration only); once per process."""
    _REGISTER_ONCE()


def apply_plugin_hooks() -> None:
    """Register if needed, then resolve and patch every hook target; once per process."""
    _APPLY_ONCE()


def plugins_registered() -> bool:
    return _REGISTER_ONCE.done


def hooks_applied() -> bool:
    return _APPLY_ONCE.done


def plugin_records() -> list[PluginRecord]:
    """What :func:`load_plugins` did with each entry point of ``sglang.multimodal_gen.plugins``."""
    return list(_State.records)


def format_plugin_report() -> str:
    return format_records(f"diffusion general plugins ({PLUGIN_GROUP})", plugin_records())


def plugin_manifest() -> dict[str, Any]:
    """Plugins and applied hook chains of this process (reported at every handshake)."""
    from sglang.plugin_core.manifest import build_manifest

    return build_manifest(_State.records, HookRegistry)


__all__ = [
    "NONE_RESULT",
    "ChainEntry",
    "HookConflictWarning",
    "HookFailure",
    "HookRegistry",
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
