"""SRT hook registry: ``HookType``, ``HookRegistry``, ``plugin_hook``.

Hooks registered here only ever apply to SRT; the diffusion runtime has its own
registry in ``sglang.multimodal_gen.runtime.platforms.plugins``.

Usage from a plugin's entry-point callback::

    from sglang.srt.plugins.hook_registry import HookType, plugin_hook

    @plugin_hook("sglang.srt.managers.scheduler.Scheduler.get_next_batch_to_run", type=HookType.AROUND)
    def timed(original_fn, *args, **kwargs):
        return original_fn(*args, **kwargs)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from sglang.plugin_core.hooks.registry import HookConflictWarning, HookFailure, HookRegistryBase
from sglang.plugin_core.hooks.types import NONE_RESULT, ChainEntry, HookSpec, HookType, PluginSource

F = TypeVar("F", bound=Callable[..., Any])


class HookRegistry(HookRegistryBase, runtime="srt"):
    """The SRT process-local hook registry (see :class:`HookRegistryBase`)."""


# The plugin whose callback is running; every hook registered meanwhile is
# attributed to it (plugin name, distribution).
_current_plugin_source = HookRegistry._source_var


def plugin_hook(target: str, type: HookType | str = HookType.AROUND) -> Callable[[F], F]:
    """Decorator form of :meth:`HookRegistry.register`; returns the function or class unchanged."""
    return HookRegistry.hook(target, type)


__all__ = [
    "NONE_RESULT",
    "ChainEntry",
    "HookConflictWarning",
    "HookFailure",
    "HookRegistry",
    "HookSpec",
    "HookType",
    "PluginSource",
    "plugin_hook",
]
