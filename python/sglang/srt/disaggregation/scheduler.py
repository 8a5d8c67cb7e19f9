"""The scheduler's disaggregation side, chosen once from ``--disaggregation-mode`` and attached to a
scheduler rank by :func:`run_disagg_scheduler_process` (what the engine spawns for a prefill or decode server).

Both sides offer what the scheduler calls: ``add`` (take a new request), ``after_first_token`` (take a
prefilled one), ``abort``, ``poll`` (every step), ``holds``, ``busy``, ``queues`` (gauges) and ``close``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sglang.srt.runtime_context import get_disagg

if TYPE_CHECKING:
    from sglang.srt.server_args import ServerArgs


def create_disagg_side(scheduler: Any) -> Any:
    """The prefill or decode side of ``scheduler``, or ``None`` for a colocated server."""
    from sglang.srt.arg_groups.disagg import Timeouts

    mode = get_disagg().disaggregation_mode
    if mode == "prefill":
        from sglang.srt.disaggregation.prefill import PrefillSide

        return PrefillSide(scheduler, Timeouts.from_env())
    if mode == "decode":
        from sglang.srt.disaggregation.decode import DecodeSide

        return DecodeSide(scheduler, Timeouts.from_env())
    return None


def attach_disagg_side(scheduler: Any) -> None:
    scheduler.disagg = create_disagg_side(scheduler)


def run_disagg_scheduler_process(server_args: ServerArgs, port_args: Any, gpu_id: int, tp_rank: int, pipe: Any, dp_rank: int = 0) -> None:
    """A scheduler rank of a prefill or decode server (``run_scheduler_process`` with its side attached)."""
    from sglang.srt.managers.scheduler_process import run_scheduler_rank

    run_scheduler_rank(server_args, port_args, gpu_id, tp_rank, pipe, dp_rank, setup=attach_disagg_side)
