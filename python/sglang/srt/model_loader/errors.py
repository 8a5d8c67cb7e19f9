"""Errors of model loading; each names the file (and tensor) and the fix."""

from __future__ import annotations


class ModelLoadError(RuntimeError):
    pass
