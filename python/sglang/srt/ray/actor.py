"""``SchedulerActor``: one scheduler rank as a Ray actor.

The launcher (``RayRanks``) calls, in order: ``node()`` (where it landed: the
address of rank 0 becomes its replica's ``dist_init``), ``start(...)`` (the
same ``start_scheduler`` body as a spawned rank; returns the ready report or
the start-up error with its traceback, never raises), then ``serve()``, which
returns only when the rank stops: its ObjectRef resolving is how the launcher
learns the actor died.
"""

from __future__ import annotations

import traceback
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sglang.srt.server_args import ServerArgs


class SchedulerActor:
    """Plain class; the launcher wraps it with ``ray.remote`` (so this module never imports ray)."""

    def __init__(self, log_level: str, name: str) -> None:
        from sglang.utils.process import configure_child_logging

        configure_child_logging(log_level, name)
        self.name = name
        self.scheduler: Any = None
        self.io: Any = None

    def node(self) -> dict[str, Any]:
        """This actor's node: its address, id, and a free port there for torch.distributed."""
        import ray

        from sglang.utils.process import free_port

        ip = ray.util.get_node_ip_address()
        return {"ip": ip, "node_id": ray.get_runtime_context().get_node_id(), "port": free_port(ip),
                "actor_id": ray.get_runtime_context().get_actor_id()}

    def start(self, server_args: ServerArgs, port_args: Any, gpu_id: int, tp_rank: int, dp_rank: int, threads: int) -> dict[str, Any]:
        from sglang.srt.managers.scheduler_process import start_scheduler

        try:
            self.scheduler, self.io, ready = start_scheduler(server_args, port_args, gpu_id, tp_rank, dp_rank, threads)
        except BaseException:
            return {"status": "error", "rank": tp_rank, "dp_rank": dp_rank, "error": traceback.format_exc()}
        return ready

    def serve(self) -> None:
        import signal
        import threading

        from sglang.srt.managers.scheduler_process import serve_scheduler

        if threading.current_thread() is threading.main_thread():
            # Ray's own SIGTERM handler raises SystemExit inside the event loop, which would be logged as a
            # scheduler fault; a rank told to stop (the launcher's kill, its group's removal) just ends.
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        serve_scheduler(self.scheduler, self.io)
