"""Error hierarchy of the plugin subsystem: one base, each error names the fix."""

from __future__ import annotations


class PluginError(Exception):
    """Base of every error raised by plugin discovery, loading and hooks."""


class HookRegistrationError(PluginError, TypeError):
    """A hook was rejected at registration (bad type, bad callable, bad target)."""


class HookTargetError(PluginError, ValueError):
    """A hook target is malformed, does not import, or names a missing attribute."""


class HookApplyError(PluginError, TypeError):
    """A hook cannot be applied to what its target resolved to."""


class HookReturnError(PluginError, TypeError):
    """A BEFORE hook returned something other than ``None`` or ``(args, kwargs)``."""


class PluginLoadError(PluginError, RuntimeError):
    """A plugin that is part of the selected platform's contract failed; start-up aborts."""
