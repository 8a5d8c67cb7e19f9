"""The torch profiler of one scheduler rank, driven by ``/start_profile`` and ``/stop_profile``."""

from __future__ import annotations

import logging
import os
from typing import Any

from sglang.srt.managers.io_struct import ProfileReq

logger = logging.getLogger(__name__)


def trace_path(output_dir: str, stamp: str, tp_rank: int, dp_rank: int = 0) -> str:
    """Where rank ``tp_rank`` of replica ``dp_rank`` writes the trace of the profile started at ``stamp``
    (the engine waits for it); replica 0's name carries no ``DP`` part, as without data parallelism."""
    replica = f"DP{dp_rank}-" if dp_rank else ""
    return os.path.join(output_dir, f"{stamp}-{replica}TP{tp_rank}.trace.json")


class RankProfiler:
    """Starts and stops ``torch.profiler`` on request; one profile at a time per rank.

    A failure to start or write is logged and ends the profile: profiling never fails a request.
    """

    def __init__(self, tp_rank: int, dp_rank: int = 0) -> None:
        self.tp_rank, self.dp_rank = tp_rank, dp_rank
        self.prof: Any = None
        self.target: ProfileReq | None = None
        self.steps_left: int | None = None

    def handle(self, msg: ProfileReq) -> None:
        if msg.action == "start":
            self.stop()  # a second start ends the first profile
            self._start(msg)
        else:
            self.stop()

    def _start(self, msg: ProfileReq) -> None:
        import torch

        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        try:
            os.makedirs(msg.output_dir, exist_ok=True)
            self.prof = torch.profiler.profile(activities=activities, record_shapes=True)
            self.prof.start()
        except Exception as exc:
            logger.error("the profiler did not start (%s): %s", msg.output_dir, exc)
            self.prof = None
            return
        self.target, self.steps_left = msg, msg.num_steps
        logger.info("profiling TP%d into %s", self.tp_rank, msg.output_dir)

    def step(self) -> None:
        """After each forward step: stop once ``num_steps`` were profiled."""
        if self.prof is None or self.steps_left is None:
            return
        self.steps_left -= 1
        if self.steps_left <= 0:
            self.stop()

    def stop(self) -> None:
        if self.prof is None or self.target is None:
            return
        prof, target = self.prof, self.target
        self.prof, self.target, self.steps_left = None, None, None
        path = trace_path(target.output_dir, target.stamp, self.tp_rank, self.dp_rank)
        try:
            prof.stop()
            prof.export_chrome_trace(path + ".part")
            os.replace(path + ".part", path)  # the engine waits for the final name: never a half-written file
        except Exception as exc:
            logger.error("the profile trace could not be written to %s: %s", path, exc)
            return
        logger.info("profile trace written: %s", path)
