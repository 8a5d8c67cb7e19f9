"""Errors of server-argument resolution and validation."""

from __future__ import annotations


class ServerArgsError(ValueError):
    """A server argument is invalid; the message names the flag and the fix."""


class DeclarationError(ServerArgsError):
    """A declaration names an unknown or non-declarable field, or comes at the wrong time."""
