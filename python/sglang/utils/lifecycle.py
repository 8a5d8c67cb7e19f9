"""``Closing``: the context-manager and finalizer protocol of objects that own child processes."""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T", bound="Closing")


class Closing:
    """``with obj:`` and garbage collection both call ``shutdown()``; subclasses define it (idempotent)."""

    def shutdown(self) -> None:
        raise NotImplementedError

    def __enter__(self: T) -> T:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def __del__(self) -> None:
        try:
            self.shutdown()
        except Exception:  # interpreter teardown: modules may already be gone
            pass


__all__ = ["Closing"]
