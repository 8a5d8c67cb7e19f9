"""Scale-out on Ray (``--use-ray``, ``sglang[ray]``): scheduler ranks as Ray actors.

``RayEngine`` is an ``Engine`` whose only difference is how the scheduler ranks
start: one :class:`SchedulerActor` per (replica, TP rank) in a placement group,
each running the same start-and-serve body as a spawned rank
(``sglang.srt.managers.scheduler_process``). ZMQ still carries requests and
results; the detokenizer stays a local process. Importing this package does not
import ray; its members do, when used.
"""

from __future__ import annotations

from typing import Any

__all__ = ["RayEngine", "SchedulerActor"]


def __getattr__(name: str) -> Any:
    if name == "RayEngine":
        from sglang.srt.ray.engine import RayEngine

        return RayEngine
    if name == "SchedulerActor":
        from sglang.srt.ray.actor import SchedulerActor

        return SchedulerActor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
