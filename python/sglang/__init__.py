"""sglang: a small, clean-room implementation of the SGLang runtime architecture.

``import sglang`` stays light: it imports no torch and no runtime module. Heavy
pieces are reached through their own modules (``sglang.srt.platforms``,
``sglang.srt.plugins``, ...), which load lazily.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["Engine", "__version__"]


def __getattr__(name: str) -> object:
    if name == "Engine":  # heavy: imported on first use only
        from sglang.srt.entrypoints.engine import Engine

        return Engine
    raise AttributeError(f"module 'sglang' has no attribute {name!r}")
