"""A scheduler built in this process for the benchmark scripts: no launcher, no HTTP."""

from __future__ import annotations

from typing import Any


def scheduler(**server_args: Any) -> Any:
    """Publish ``ServerArgs(log_level="warning", **server_args)`` as the scheduler's and build a Scheduler
    (rank 0, its distributed store on a free loopback port). Call once per process, or after
    ``reset_context()``: publishing is once per context."""
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.runtime_context import publish
    from sglang.srt.server_args import ServerArgs
    from sglang.utils.process import free_port

    sa = ServerArgs(**{"log_level": "warning", **server_args})
    publish(sa, role="scheduler")
    return Scheduler(sa, 0, 0, f"tcp://127.0.0.1:{free_port()}")
