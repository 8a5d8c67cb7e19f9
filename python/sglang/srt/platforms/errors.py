"""Errors of SRT platform selection; each message names the thing and the fix."""

from __future__ import annotations


class PlatformError(RuntimeError):
    """Base of every SRT platform error."""


class PlatformSelectionError(PlatformError):
    """``SGLANG_PLATFORM`` names nothing installed, or several platforms are active."""


class PlatformUnavailableError(PlatformError):
    """The selected platform's ``activate()`` returned ``None``: no hardware."""


class PlatformActivationError(PlatformError):
    """A platform entry point failed to import, raised, or returned a non-string."""


class PlatformClassError(PlatformError, TypeError):
    """The qualname does not import, or is not an ``SRTPlatform`` subclass."""


class PlatformContractError(PlatformClassError):
    """A platform class breaks the SRT platform interface; raised when the class is defined, naming every problem."""
