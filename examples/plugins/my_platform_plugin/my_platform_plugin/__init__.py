"""Example platform plugin: an emulated ``my_device`` that lives in host memory.

``activate()`` stays import-safe: it touches no ``current_platform`` and no
device state, and imports nothing of the runtime.
"""

from __future__ import annotations

import os


def _my_device_is_available() -> bool:
    # A real vendor probes its driver here. The emulated device can be hidden
    # with MY_DEVICE_VISIBLE=0 to see the "hardware not available" path.
    return os.environ.get("MY_DEVICE_VISIBLE", "1") != "0"


def activate() -> str | None:
    """Return the qualified class name to activate, or None to skip."""
    if _my_device_is_available():
        return "my_platform_plugin.platform.MySRTPlatform"
    return None


def activate_diffusion() -> str | None:
    """Diffusion activation callback: the diffusion ``Platform`` class, or None."""
    if _my_device_is_available():
        return "my_platform_plugin.diffusion_platform.MyDiffusionPlatform"
    return None


def register_hooks() -> None:
    """``sglang.multimodal_gen.plugins`` callback: rank-aware set-up around the worker.

    Registration only: importing the hook API imports nothing of the runtime,
    and the target is resolved later by ``apply_plugin_hooks()``.
    """
    from my_platform_plugin.diffusion_hooks import register

    register()
