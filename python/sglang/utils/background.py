"""Work on a daemon thread, its outcome through a future (a process exiting meanwhile does not wait for it)."""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def in_background(fn: Callable[..., T], *args: Any, name: str) -> concurrent.futures.Future[T]:
    """``fn(*args)`` on a daemon thread named ``name``; its result or exception through the returned future.
    Unlike a ``ThreadPoolExecutor``'s worker (joined at interpreter exit), an abandoned call never delays exit."""
    fut: concurrent.futures.Future[T] = concurrent.futures.Future()

    def run() -> None:
        try:
            fut.set_result(fn(*args))
        except BaseException as exc:  # the caller's .result() raises it
            fut.set_exception(exc)

    threading.Thread(target=run, daemon=True, name=name).start()
    return fut


__all__ = ["in_background"]
