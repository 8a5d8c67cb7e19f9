"""``SchedulerClient``: thread-safe request/response over the scheduler connection.

One receiver thread matches replies to requests by id, so several threads
(the HTTP server's) may wait at once. When the scheduler dies every waiting
and later request fails with :class:`SchedulerDiedError` within a second.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from concurrent.futures import Future
from typing import Any

from sglang.multimodal_gen.runtime.pipelines.outputs import DiffusionOutput
from sglang.multimodal_gen.runtime.pipelines.sampling_params import SamplingParams, SamplingParamsError


class SchedulerDiedError(RuntimeError):
    """The scheduler process is gone; no request can be served."""


class RequestFailedError(RuntimeError):
    """The scheduler could not serve one request (it keeps serving others)."""


class SchedulerClient:
    def __init__(self, conn: Any, procs: list[Any] | None = None) -> None:
        self.conn, self.procs = conn, list(procs or [])
        self._ids = itertools.count()
        self._pending: dict[int, Future[list[DiffusionOutput]]] = {}
        self._lock = threading.Lock()
        self._dead: str | None = None
        self._rx = threading.Thread(target=self._receive, name="diffusion-client-rx", daemon=True)
        self._rx.start()

    @property
    def alive(self) -> bool:
        return self._dead is None

    def _receive(self) -> None:
        while True:
            try:
                if not self.conn.poll(0.5):
                    if any(not p.is_alive() for p in self.procs):
                        raise EOFError
                    continue
                msg = self.conn.recv()
                if msg[0] == "failed":  # the scheduler's last words before it exits
                    self._fail_all(f"the diffusion scheduler failed: {msg[1]}")
                    return
                kind, rid, payload = msg
            except (EOFError, OSError):
                dead = [f"{p.name} (exit code {p.exitcode})" for p in self.procs if not p.is_alive()]
                self._fail_all(f"the diffusion scheduler is gone: {', '.join(dead) or 'connection closed'}; see its log")
                return
            fut = self._pending.pop(rid, None)
            if fut is None:
                continue
            if kind == "ok":
                fut.set_result(payload)
            else:
                param, message = payload
                fut.set_exception(SamplingParamsError(param, message) if param and param != "internal" else RequestFailedError(message))

    def _fail_all(self, why: str) -> None:
        with self._lock:
            self._dead = why
            pending, self._pending = self._pending, {}
        for fut in pending.values():
            fut.set_exception(SchedulerDiedError(why))

    def submit(self, params: SamplingParams) -> Future[list[DiffusionOutput]]:
        fut: Future[list[DiffusionOutput]] = Future()
        with self._lock:
            if self._dead is not None:
                raise SchedulerDiedError(self._dead)
            rid = next(self._ids)
            self._pending[rid] = fut
            self.conn.send(("generate", rid, params))
        return fut

    def generate(self, params: SamplingParams, timeout: float | None = None) -> list[DiffusionOutput]:
        return self.submit(params).result(timeout)

    async def agenerate(self, params: SamplingParams) -> list[DiffusionOutput]:
        return await asyncio.wrap_future(self.submit(params))

    def close(self) -> None:
        with self._lock:
            if self._dead is None:
                try:
                    self.conn.send(("shutdown", None, None))
                except (OSError, BrokenPipeError):
                    pass
                self._dead = "the client was closed"
