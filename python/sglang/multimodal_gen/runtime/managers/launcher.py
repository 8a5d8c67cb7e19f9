"""Start diffusion children from a launcher process (``DiffGenerator``, ``sglang serve``)."""

from __future__ import annotations

import logging
import time
from typing import Any

from sglang.multimodal_gen.runtime.managers.worker_bootstrap import (
    HTTP_ENTRY,
    SchedulerProcessSpec,
    ServerArgsPayload,
    get_spawn_context,
    http_process_main,
    scheduler_process_main,
)

logger = logging.getLogger(__name__)


class SchedulerStartError(RuntimeError):
    """The scheduler child failed before it was ready; the message holds its error."""


def spawn_scheduler(server_args: Any, rank: int = 0) -> tuple[Any, Any]:
    """Start a scheduler child; returns (process, parent end of its connection)."""
    ctx = get_spawn_context()
    parent, child = ctx.Pipe()
    spec = SchedulerProcessSpec(ServerArgsPayload.pack(server_args), rank=rank, log_level=server_args.log_level)
    proc = ctx.Process(target=scheduler_process_main, args=(spec, child), name=f"sglang-diffusion-scheduler-{rank}", daemon=True)
    proc.start()
    child.close()
    return proc, parent


def wait_ready(proc: Any | None, conn: Any, timeout: float = 300.0) -> dict[str, Any]:
    """The scheduler's ready info; raises with the child's error if it failed or died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if conn.poll(0.1):
            try:
                kind, payload = conn.recv()
            except EOFError:
                break
            if kind == "ready":
                return payload
            raise SchedulerStartError(f"the diffusion scheduler failed to start: {payload}")
        if proc is not None and not proc.is_alive():
            break
    if proc is None:
        raise SchedulerStartError("the diffusion scheduler closed its connection before it was ready; see its log above")
    proc.join(timeout=5)
    raise SchedulerStartError(
        f"the diffusion scheduler (pid {proc.pid}) exited with code {proc.exitcode} before it was ready; see its log above"
        if proc.exitcode is not None else f"the diffusion scheduler did not become ready within {timeout:.0f} s"
    )


def spawn_http(server_args: Any, conn: Any) -> Any:
    ctx = get_spawn_context()
    spec = SchedulerProcessSpec(ServerArgsPayload.pack(server_args), entry=HTTP_ENTRY, log_level=server_args.log_level, role="http")
    proc = ctx.Process(target=http_process_main, args=(spec, conn), name="sglang-diffusion-http", daemon=False)
    proc.start()
    return proc


def launch_diffusion_server(server_args: Any) -> int:
    """``sglang serve`` for a diffusion model: scheduler and HTTP children, watched here.

    SIGINT/SIGTERM stop both children within seconds; if either child dies the
    other is stopped and the exit status is non-zero.
    """
    import signal

    from sglang.multimodal_gen.runtime.platforms import get_platform_decision
    from sglang.multimodal_gen.runtime.platforms.plugins import HookRegistry, apply_plugin_hooks, format_plugin_report

    apply_plugin_hooks()
    logger.info("diffusion %s", get_platform_decision().format())
    logger.info("%s", format_plugin_report())
    for t in HookRegistry.applied_targets():
        logger.info("hook chain %s: %s", t, " -> ".join(e.format() for e in HookRegistry.describe(t)))
    server_args.log_summary()
    sched, conn = spawn_scheduler(server_args)
    http = spawn_http(server_args, conn)
    conn.close()
    stop = {"signal": None}

    def on_signal(sig: int, _frame: Any) -> None:
        stop["signal"] = sig

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    code = 0
    try:
        while stop["signal"] is None:
            if not sched.is_alive() or not http.is_alive():
                dead = sched if not sched.is_alive() else http
                logger.error("diffusion %s process exited with code %s; shutting down", dead.name, dead.exitcode)
                code = 1
                break
            time.sleep(0.2)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if http.is_alive():
            http.terminate()
            http.join(8)
        for p in (http, sched):
            if p.is_alive():
                p.terminate()
                p.join(5)
            if p.is_alive():
                p.kill()
                p.join(2)
    return code
