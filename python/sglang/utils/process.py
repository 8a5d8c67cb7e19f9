"""Child-process hygiene: die with the parent, log with a prefix, free ports."""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import socket
import sys
import threading
import time

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Make the kernel kill this process when its parent dies (Linux), plus a polling fallback."""
    parent = os.getppid()
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass

    def watch() -> None:
        while True:
            if os.getppid() != parent:
                os._exit(1)
            time.sleep(1.0)

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()


def configure_child_logging(level: str, prefix: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format=f"[%(asctime)s {prefix}] %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
        force=True,
    )


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
