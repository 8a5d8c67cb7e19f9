"""A uvicorn server that stops gracefully on SIGINT/SIGTERM and returns (shared by both runtimes)."""

from __future__ import annotations

from typing import Any


def graceful_server_class() -> type:
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
                self.should_exit = True

            old = {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for sig, h in old.items():
                    signal.signal(sig, h)

    return Server
