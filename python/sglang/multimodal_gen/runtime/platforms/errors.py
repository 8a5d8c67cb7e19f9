"""Errors of diffusion platform selection; each names the thing and the fix."""

from __future__ import annotations


class DiffusionPlatformError(RuntimeError):
    """Base of every diffusion platform selection and initialization error."""


class DiffusionPlatformSelectionError(DiffusionPlatformError):
    """The override or the installed entry points do not determine one platform."""


class DiffusionPlatformUnavailableError(DiffusionPlatformSelectionError):
    """The platform the override names reports no hardware (its ``activate()`` returned ``None``)."""


class DiffusionPlatformActivationError(DiffusionPlatformError):
    """An activation callback failed to import, raised, or returned garbage."""


class DiffusionPlatformClassError(DiffusionPlatformError, TypeError):
    """The class an activation callback named breaks the diffusion platform contract."""


class DiffusionPlatformContractError(DiffusionPlatformClassError):
    """A platform class breaks the diffusion platform interface; raised when the class is defined, naming every problem."""


class BackendInitError(DiffusionPlatformError):
    """``init_backend()`` of the selected platform raised; terminal for the process."""
