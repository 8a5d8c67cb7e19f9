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

from sglang.plugin_core.hooks.registry import HookConflictWarning, HookFailure, HookRegistryBase
from sglang.plugin_core.hooks.types import NONE_RESULT, ChainEntry, HookSource, HookSpec, HookType, PluginSource


class HookRegistry(HookRegistryBase, runtime="srt"):
    """The SRT process-local hook registry (see :class:`HookRegistryBase`)."""


# The plugin whose callback is running; every hook registered meanwhile is
# attributed to it (a HookSource: plugin name, distribution).
_current_plugin_source = HookRegistry._source_var

plugin_hook = HookRegistry.hook  # plugin_hook(target, type=HookType.AFTER): decorator form of register

__all__ = [
    "NONE_RESULT",
    "ChainEntry",
    "HookConflictWarning",
    "HookFailure",
    "HookRegistry",
    "HookSource",
    "HookSpec",
    "HookType",
    "PluginSource",
    "plugin_hook",
]
