"""A uvicorn server that stops gracefully on SIGINT/SIGTERM and returns (shared by both runtimes)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def graceful_server_class(on_signal: Callable[[], None] | None = None, on_started: Callable[[Any], None] | None = None) -> type:
    """A ``uvicorn.Server`` subclass.

    ``on_signal()`` runs at the first SIGINT/SIGTERM, after ``should_exit`` is
    set (the SRT server ends every pending request with an error body there,
    so in-flight clients are answered before the graceful timeout).
    ``on_started(server)`` runs once the socket listens, unless the server is
    already stopping (the start-up banner: never printed after a shutdown).
    """
    import contextlib
    import signal

    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn that shuts down gracefully on SIGINT/SIGTERM and then returns
        (instead of re-raising the signal), so the engine's children are stopped
        and the process exits 0."""

        @contextlib.contextmanager
        def capture_signals(self) -> Any:
            def handle(sig: int, frame: Any) -> None:
                if self.should_exit:
                    self.force_exit = True
                    return
                self.should_exit = True
                if on_signal is not None:
                    on_signal()

            old = {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for sig, h in old.items():
                    signal.signal(sig, h)

        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets=sockets)
            if on_started is not None and self.started and not self.should_exit:
                on_started(self)

    return Server
