"""Start diffusion children from a launcher process (``DiffGenerator``, ``sglang serve``)."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from sglang.multimodal_gen.runtime.managers.worker_bootstrap import (
    HTTP_ENTRY,
    SchedulerProcessSpec,
    ServerArgsPayload,
    get_spawn_context,
    http_process_main,
    scheduler_process_main,
)

if TYPE_CHECKING:
    from sglang.multimodal_gen.runtime.server_args import ServerArgs

logger = logging.getLogger(__name__)


class SchedulerStartError(RuntimeError):
    """The scheduler child failed before it was ready; the message holds its error."""


def spawn_schedulers(server_args: ServerArgs) -> tuple[list[Any], Any]:
    """Start ``num_gpus`` scheduler children; returns (processes, connection to rank 0)."""
    from sglang.utils.process import free_port

    if server_args.num_gpus > 1 and server_args.dist_port is None:
        server_args.dist_port = free_port()
    ctx = get_spawn_context()
    parent, child = ctx.Pipe()
    payload = ServerArgsPayload.pack(server_args)
    procs = []
    for rank in range(server_args.num_gpus):
        spec = SchedulerProcessSpec(payload, rank=rank, world_size=server_args.num_gpus, log_level=server_args.log_level)
        proc = ctx.Process(
            target=scheduler_process_main, args=(spec, child if rank == 0 else None), name=f"sglang-diffusion-scheduler-{rank}", daemon=True
        )
        proc.start()
        procs.append(proc)
    child.close()
    return procs, parent


def stop_processes(procs: list[Any], grace: float = 10.0) -> None:
    """Wait up to ``grace`` seconds for ``procs`` to exit, then terminate and kill what is left."""
    deadline = time.monotonic() + grace
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.terminate()
            p.join(3)
        if p.is_alive():
            p.kill()
            p.join(2)


def wait_ready(procs: list[Any] | None, conn: Any, timeout: float = 300.0) -> dict[str, Any]:
    """Rank 0's ready info; raises with the child's error if one failed or died."""
    deadline = time.monotonic() + timeout
    proc = None
    while time.monotonic() < deadline:
        if conn.poll(0.1):
            try:
                kind, payload = conn.recv()
            except EOFError:
                break
            if kind == "ready":
                return payload
            raise SchedulerStartError(f"the diffusion scheduler failed to start: {payload}")
        dead = [p for p in procs or [] if not p.is_alive()]
        if dead:
            proc = dead[0]
            break
    if proc is None:
        if procs:
            raise SchedulerStartError(f"the diffusion schedulers did not become ready within {timeout:.0f} s")
        raise SchedulerStartError("the diffusion scheduler closed its connection before it was ready; see its log above")
    proc.join(timeout=5)
    raise SchedulerStartError(f"the diffusion scheduler {proc.name} (pid {proc.pid}) exited with code {proc.exitcode} before it was ready; see its log above")


def check_scheduler_manifests(info: dict[str, Any], expected: dict[str, Any]) -> None:
    """Compare the manifest every scheduler rank reported at the handshake with ``expected``."""
    from sglang.plugin_core.manifest import check_manifest

    for process, manifest in info.get("manifests", []):
        check_manifest(process, expected, manifest, "diffusion")


def launcher_manifest() -> dict[str, Any]:
    from sglang.multimodal_gen.runtime.platforms.plugins import plugin_manifest

    return plugin_manifest()


def spawn_http(server_args: ServerArgs, conn: Any) -> Any:
    import json

    ctx = get_spawn_context()
    spec = SchedulerProcessSpec(
        ServerArgsPayload.pack(server_args), entry=HTTP_ENTRY, log_level=server_args.log_level, role="http",
        launcher_manifest=json.dumps(launcher_manifest()),
    )
    proc = ctx.Process(target=http_process_main, args=(spec, conn), name="sglang-diffusion-http", daemon=False)
    proc.start()
    return proc


def launch_diffusion_server(server_args: ServerArgs) -> int:
    """``sglang serve`` for a diffusion model: scheduler and HTTP children, watched here.

    SIGINT/SIGTERM stop both children within seconds; if either child dies the
    other is stopped and the exit status is non-zero.
    """
    import signal

    from sglang.multimodal_gen.runtime.managers.worker_bootstrap import launcher_bootstrap
    from sglang.multimodal_gen.runtime.platforms import get_platform_decision
    from sglang.multimodal_gen.runtime.platforms.plugins import HookRegistry, format_plugin_report

    launcher_bootstrap()
    logger.info("diffusion %s", get_platform_decision().format())
    logger.info("%s", format_plugin_report())
    for t in HookRegistry.applied_targets():
        logger.info("hook chain %s: %s", t, " -> ".join(e.format() for e in HookRegistry.describe(t)))
    server_args.log_summary()
    scheds, conn = spawn_schedulers(server_args)
    http = spawn_http(server_args, conn)
    conn.close()
    stop = {"signal": None}

    def on_signal(sig: int, _frame: Any) -> None:
        stop["signal"] = sig

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    code = 0
    try:
        while stop["signal"] is None:
            gone = [p for p in (*scheds, http) if not p.is_alive()]
            if gone:
                dead = gone[0]
                logger.error("diffusion %s process exited with code %s; shutting down", dead.name, dead.exitcode)
                code = 1
                break
            time.sleep(0.2)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if http.is_alive():
            http.terminate()  # graceful: it tells the schedulers to shut down
        stop_processes([http, *scheds], grace=8.0)
    return code
