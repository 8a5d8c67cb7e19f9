"""The LoRA subsystem's errors: each names the file, key or flag, and the fix."""

from __future__ import annotations


class LoRAError(ValueError):
    """An adapter cannot be served (bad files, too large a rank, a module the pool does not hold)."""


class LoRAConfigError(LoRAError):
    """An adapter's ``adapter_config.json`` or weights do not fit this server."""
