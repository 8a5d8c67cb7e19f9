"""Process-level handles: named side streams and persistent buffers (lazy)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class ResourceError(RuntimeError):
    pass


class Resources:
    """Streams are leased by subsystem *role* ("alt", "offload", ...), not per call site."""

    def __init__(self) -> None:
        self.streams: dict[str, Any] = {}
        self.buffers: dict[str, Any] = {}
        self.slots: dict[str, Any] = {}

    def get_stream(self, name: str, capturing: bool, device_type: str) -> Any:
        stream = self.streams.get(name)
        if stream is None:
            if capturing:
                raise ResourceError(
                    f"stream {name!r} would be created during graph capture (a driver call); "
                    "lease streams at init or warm-up time, before capture starts"
                )
            import torch

            stream = torch.get_device_module(device_type).Stream()
            self.streams[name] = stream
        return stream

    def get_buffer(self, name: str, factory: Callable[[], Any], capturing: bool) -> Any:
        buf = self.buffers.get(name)
        if buf is None:
            if capturing:
                raise ResourceError(f"buffer {name!r} would be allocated during graph capture; allocate it at warm-up")
            buf = self.buffers[name] = factory()
        return buf
