"""Environment variables of the diffusion runtime (import-safe: stdlib only)."""

from __future__ import annotations

import os

SGLANG_DIFFUSION_PLATFORM_OVERRIDE = "SGLANG_DIFFUSION_PLATFORM_OVERRIDE"
SGLANG_PLUGINS = "SGLANG_PLUGINS"
SGLANG_PLUGINS_STRICT = "SGLANG_PLUGINS_STRICT"


def platform_override() -> str | None:
    """The diffusion platform selector, stripped; ``None`` when unset or blank."""
    raw = os.environ.get(SGLANG_DIFFUSION_PLATFORM_OVERRIDE, "").strip()
    return raw or None

