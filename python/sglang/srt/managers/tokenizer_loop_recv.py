"""The tokenizer manager's results read on the HTTP server's event loop instead of a receiver thread.

With a receiver thread, each detokenizer message woke that thread, which handed every waiting stream to the loop
through ``call_soon_threadsafe`` (a second wake). On the 2-core machines each wake of a process idle since the last
token costs 0.03-0.15 ms of CPU (its caches are cold: the decode step streams ~100 MB through them between two
tokens), taken from one of the decode step's two threads, which the other then waits for. On the loop, a message
wakes the loop alone, which sets each stream's ``asyncio.Event`` directly.

Only the HTTP server hands its loop over (:meth:`TokenizerManager.serve_on_loop`, once, from inside the loop at
start-up); ``sglang.Engine`` keeps the thread, whose callers may have no loop or several.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any

import zmq

logger = logging.getLogger(__name__)


class LoopReceiver:
    """Drains a ZMQ PULL socket on ``loop`` whenever its file descriptor signals. Invariant: once started, only the
    loop's thread touches the socket (ZMQ sockets are not thread-safe), until :meth:`stop` returns."""

    def __init__(self, sock: zmq.Socket, loop: asyncio.AbstractEventLoop, handle: Callable[[Any], None]) -> None:
        self.sock, self.loop, self.handle = sock, loop, handle
        self.fd = sock.getsockopt(zmq.FD)
        self.stopped = False

    def start(self) -> None:
        """Register the reader; call on the loop's thread, after the receiver thread has ended."""
        self.loop.add_reader(self.fd, self.drain)
        self.drain()  # messages that arrived while the thread handed over: the descriptor signals only new ones

    def drain(self) -> None:
        """Every queued message, handled in order. ZMQ's descriptor is edge-triggered: it signals when the socket's
        state changes, so everything queued is read before returning, and EVENTS is read to re-arm it."""
        while not self.stopped:
            try:
                if not self.sock.getsockopt(zmq.EVENTS) & zmq.POLLIN:
                    return
                msg = self.sock.recv_pyobj(zmq.NOBLOCK)
            except zmq.Again:
                return
            except zmq.ZMQError as exc:  # the socket closed under us: only at shutdown
                logger.debug("tokenizer manager: the result socket is gone: %s", exc)
                return
            except Exception as exc:  # a message that does not unpickle: the next ones still count
                logger.exception("tokenizer manager: a message from the engine could not be read: %s", exc)
                continue
            try:
                self.handle(msg)
            except Exception as exc:  # as the receiver thread: every waiting request depends on this reader
                logger.exception("tokenizer manager: a message from the engine could not be handled: %s", exc)

    def stop(self, timeout: float = 2.0) -> None:
        """Unregister the reader, from any thread; returns once the loop will not touch the socket again (or at once
        when the loop is closed or not running)."""
        self.stopped = True
        if self.loop.is_closed():
            return
        if on_loop(self.loop) or not self.loop.is_running():
            self.loop.remove_reader(self.fd)
            return
        done = threading.Event()

        def remove() -> None:
            self.loop.remove_reader(self.fd)
            done.set()

        try:
            self.loop.call_soon_threadsafe(remove)
        except RuntimeError:  # closed in the meantime
            return
        done.wait(timeout)


def on_loop(loop: asyncio.AbstractEventLoop | None) -> bool:
    """Whether the caller runs on ``loop``'s thread (inside it)."""
    if loop is None:
        return False
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False
