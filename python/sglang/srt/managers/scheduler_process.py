"""A scheduler rank's life in its own process: start, report, serve.

``start_scheduler`` and ``serve_scheduler`` are the one body of a rank under
every launcher: ``run_scheduler_process`` (a ``spawn``ed process, the default)
and ``sglang.srt.ray.SchedulerActor`` (``--use-ray``). Only how the ready
report travels differs (a pipe, or the actor method's return value).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sglang.plugin_core.hooks.faults import describe_fault
from sglang.srt.managers.io_struct import EngineFatal

if TYPE_CHECKING:
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.server_args import ServerArgs

# What a launcher spawns for a colocated rank and for a disaggregated one: "module:function", resolved in the child
SCHEDULER_ENTRY = "sglang.srt.managers.scheduler:run_scheduler_process"
DISAGG_SCHEDULER_ENTRY = "sglang.srt.disaggregation.scheduler:run_disagg_scheduler_process"


def run_entry(entry: str, *args: Any, **kwargs: Any) -> None:
    """The target a launcher spawns: import ``entry`` ("module:function", e.g. :data:`SCHEDULER_ENTRY`) in the child
    and call it. This module imports no torch and no model code, so the launcher spawns its ranks without importing
    the scheduler itself (about 2 s of start-up on a 2-core host, and the HTTP process's share of memory); the child
    resolves the function through its module, as unpickling a reference to it did."""
    import traceback

    from sglang.plugin_core.discovery import import_qualname

    try:
        fn = import_qualname(entry)
    except BaseException:  # report it as a rank's start-up error (args end with the rank's pipe: see the entries)
        pipe = args[-1] if args and hasattr(args[-1], "send") else None
        if pipe is not None:
            pipe.send({"status": "error", "rank": args[3] if len(args) > 4 else 0, "dp_rank": kwargs.get("dp_rank", 0),
                       "error": f"importing the scheduler entry {entry} failed:\n{traceback.format_exc()}"})
        raise
    fn(*args, **kwargs)


def rank_name(tp_rank: int, dp_rank: int = 0) -> str:
    """``TP1``, or ``DP1-TP0`` for a rank of data-parallel replica 1: how logs and errors name a rank."""
    return f"DP{dp_rank}-TP{tp_rank}" if dp_rank else f"TP{tp_rank}"


def start_scheduler(server_args: ServerArgs, port_args: Any, gpu_id: int, tp_rank: int, dp_rank: int = 0,
                    threads: int | None = None) -> tuple[Scheduler, Any, dict[str, Any]]:
    """Everything a scheduler rank does before it serves, in the process that will serve: plugins
    (once per process), publish as ``role="scheduler"``, the I/O sockets, the Scheduler (its model
    runner calls the platform's ``init_backend()``). Returns the scheduler, its I/O and the ready
    report the launcher checks (the plugin manifest among it). The one body under both launchers:
    ``run_scheduler_process`` (a spawned process) and ``sglang.srt.ray.SchedulerActor``."""
    import os

    import torch

    from sglang.srt.managers.cpu_binding import bind_step, plan_binding
    from sglang.srt.plugins import load_plugins, plugin_manifest
    from sglang.srt.runtime_context import get_schedule, publish

    per_node = max(1, server_args.tp_size * server_args.dp_size // server_args.nnodes)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1  # what taskset/cgroups allow
    threads = threads or max(1, cores // per_node)
    binding = plan_binding(server_args, tp_rank, dp_rank, threads=threads)
    torch.set_num_threads(len(binding.step) if binding is not None else threads)
    load_plugins()
    publish(server_args, role="scheduler")
    # resolved after the hooks applied: a REPLACE of the Scheduler (or SchedulerIO) class is what this rank builds
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.managers.scheduler_io import SchedulerIO

    io = SchedulerIO(tp_rank, server_args.tp_size, port_args.scheduler_input, port_args.detokenizer_input)
    scheduler = Scheduler(server_args, gpu_id, tp_rank, port_args.dist_init, io=io, dp_rank=dp_rank)
    name = rank_name(tp_rank, dp_rank)
    if scheduler.tp_worker.model_runner.device.type == "cpu":
        from sglang.utils.malloc import keep_heap

        keep_heap()  # after loading: its large temporaries went back to the OS
        if binding is not None:
            bound = bind_step(binding)
            logging.getLogger(__name__).info("scheduler %s: the decode step's %d thread(s) bound to cores %s%s", name, bound,
                                             list(binding.step), f", the HTTP server and detokenizer to {list(binding.front)}"
                                             if binding.front else "")
    return scheduler, io, {
        "status": "ready",
        "rank": tp_rank,
        "dp_rank": dp_rank,
        "pid": os.getpid(),
        "scheduler_input": io.input_addr,
        "max_total_tokens": scheduler.max_total_tokens,
        "context_length": scheduler.context_length,
        "max_running_requests": get_schedule().max_running_requests,
        "attention_backend": scheduler.tp_worker.model_runner.attention_backend,
        "dtype": str(scheduler.tp_worker.model_runner.dtype).replace("torch.", ""),
        "kv_cache_dtype": str(scheduler.tp_worker.model_runner.kv_cache_dtype).replace("torch.", ""),  # what auto resolved to
        "quantization": scheduler.tp_worker.model_runner.quantization,  # what --quantization resolved to (None: dense)
        "weight_format": scheduler.tp_worker.model_runner.weight_format.summary(),  # kernels by kind, e.g. "120 x q4_f32; ..."
        "process": f"scheduler {name} (pid {os.getpid()})",
        "manifest": plugin_manifest(),
    }


def serve_scheduler(scheduler: Scheduler, io: Any) -> None:
    """Run the event loop until a fatal fault; tell the clients why, then raise ``SystemExit(1)``."""
    from sglang.srt.managers.scheduler_faults import SchedulerFatalError

    try:
        scheduler.event_loop()
    except BaseException as exc:  # tell the clients why before the process goes
        name = rank_name(scheduler.tp_rank, scheduler.dp_rank)
        message = str(exc) if isinstance(exc, SchedulerFatalError) else f"scheduler {name} stopped: {describe_fault(exc)}"
        logging.getLogger(__name__).critical("%s", message, exc_info=exc)
        try:
            io.send(EngineFatal(message))
        except Exception:
            pass
        raise SystemExit(1) from None


def run_scheduler_rank(server_args: ServerArgs, port_args: Any, gpu_id: int, tp_rank: int, pipe: Any, dp_rank: int = 0,
                       setup: Callable[[Scheduler], None] | None = None) -> None:
    """Body of ``run_scheduler_process`` (a spawned process): ``start_scheduler``, ``setup`` (a launcher's extra
    step, e.g. a disaggregation side), report on ``pipe``, serve."""
    import traceback

    from sglang.utils.process import configure_child_logging, die_with_parent

    die_with_parent()
    configure_child_logging(server_args.log_level, rank_name(tp_rank, dp_rank))
    try:
        scheduler, io, ready = start_scheduler(server_args, port_args, gpu_id, tp_rank, dp_rank)
        if setup is not None:
            setup(scheduler)
    except BaseException:
        pipe.send({"status": "error", "rank": tp_rank, "dp_rank": dp_rank, "error": traceback.format_exc()})
        raise
    pipe.send(ready)
    serve_scheduler(scheduler, io)
