"""The hook engine: registration, target resolution, composition, application.

Each runtime subclasses :class:`~sglang.plugin_core.hooks.registry.HookRegistryBase`
to get a registry of its own (SRT: ``sglang.srt.plugins.hook_registry``;
diffusion: ``sglang.multimodal_gen.runtime.platforms.plugins``).
"""
