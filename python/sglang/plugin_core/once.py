"""A once-per-process activation step behind a re-entrant lock."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class ActivationFailedError(RuntimeError):
    """Raised on every call after the step failed once; chained to the cause."""


class OncePerProcess(Generic[T]):
    """Run ``fn`` at most once per process.

    Invariants, which the plugin loaders of both runtimes rely on:

    - a re-entrant call from inside ``fn`` (same thread) returns ``None`` at once
      and lets the outer call finish;
    - other threads block on the lock and inherit the outcome;
    - a failure is recorded: this and every later call raise
      :class:`ActivationFailedError` chained to the original exception (the
      first caller sees the original exception itself).

    ``fn`` must not hand activation to a second thread and join it: that thread
    would wait on the lock held by the caller forever.
    """

    def __init__(self, name: str, fn: Callable[[], T]) -> None:
        self._name = name
        self._fn = fn
        self._lock = threading.RLock()
        self._running = False
        self._done = False
        self._result: T | None = None
        self._error: BaseException | None = None

    @property
    def done(self) -> bool:
        return self._done

    @property
    def error(self) -> BaseException | None:
        return self._error

    def __call__(self) -> T | None:
        if self._done:
            return self._result
        with self._lock:
            if self._running:
                return None  # re-entrant call from fn itself
            self._raise_if_failed()
            if self._done:
                return self._result
            self._running = True
            try:
                self._result = self._fn()
            except BaseException as exc:
                self._error = exc
                raise
            finally:
                self._running = False
            self._done = True
            return self._result

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise ActivationFailedError(
                f"{self._name} previously failed in this process and is not retried: "
                f"{type(self._error).__name__}: {self._error}. Fix the cause and restart "
                "the process."
            ) from self._error

    def reset_for_tests(self) -> None:
        """Forget the outcome. Only for tests that run the step again in-process."""
        with self._lock:
            self._done = False
            self._result = None
            self._error = None
