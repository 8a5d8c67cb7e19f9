"""The diffusion scheduler processes: one request at a time through ``GPUWorker``.

With ``num_gpus`` ranks, rank 0 owns the client connection and broadcasts
every message to the other ranks over the process group; all ranks run the
pipeline together (sequence parallel) and rank 0 replies.

Protocol over a ``multiprocessing`` connection (stdlib objects only):

- scheduler -> client, once: ``("ready", info)`` or ``("failed", message)``;
- client -> scheduler: ``("generate", rid, SamplingParams)`` and ``("shutdown", None, None)``;
- scheduler -> client: ``("ok", rid, [DiffusionOutput])`` or
  ``("error", rid, (param or None, message))``. A bad request never stops the loop.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

from sglang.multimodal_gen.runtime.managers.gpu_worker import GPUWorker
from sglang.multimodal_gen.runtime.pipelines.sampling_params import SamplingParamsError

if TYPE_CHECKING:
    from sglang.multimodal_gen.runtime.server_args import ServerArgs

logger = logging.getLogger(__name__)


class Scheduler:
    """Owns the worker of this rank and serves requests from one connection."""

    def __init__(self, server_args: ServerArgs, rank: int, conn: Any) -> None:
        self.server_args, self.rank, self.conn = server_args, rank, conn
        self.world_size = server_args.num_gpus
        self.worker = GPUWorker(server_args, rank=rank, local_rank=rank, world_size=self.world_size, dist_port=server_args.dist_port)
        self.worker.init_device_and_model()

    def ready_info(self) -> dict[str, Any]:
        from sglang.multimodal_gen.runtime.platforms import current_platform, get_platform_decision
        from sglang.multimodal_gen.runtime.platforms.plugins import plugin_manifest

        mine = (f"diffusion scheduler rank {self.rank} (pid {os.getpid()})", plugin_manifest())
        manifests = [mine]
        if self.world_size > 1:
            import torch.distributed as dist

            manifests = [None] * self.world_size  # type: ignore[list-item]
            dist.all_gather_object(manifests, mine)
        return {
            "pid": os.getpid(),
            "num_gpus": self.world_size,
            "manifests": manifests,
            "platform": repr(current_platform),
            "decision": get_platform_decision().as_dict(),
            "worker": self.worker.info,
            "config": self.worker.pipeline.config.to_dict(),
        }

    def handle(self, rid: Any, params: Any) -> tuple[str, Any, Any]:
        try:
            return "ok", rid, self.worker.execute_forward(params)
        except SamplingParamsError as exc:
            return "error", rid, (exc.param, exc.message)
        except ValueError as exc:  # e.g. a prompt that names no class
            return "error", rid, ("prompt" if "prompt" in str(exc) else None, str(exc))
        except Exception as exc:
            logger.exception("request %s failed", rid)
            return "error", rid, ("internal", f"{type(exc).__name__}: {exc}")

    def _next_message(self) -> tuple[str, Any, Any]:
        """Rank 0 reads the client; every rank then holds the same message."""
        msg: tuple[str, Any, Any] = ("shutdown", None, None)
        if self.rank == 0:
            try:
                msg = self.conn.recv()
            except (EOFError, OSError):
                logger.info("client connection closed; scheduler exits")
        if self.world_size > 1:
            import torch.distributed as dist

            box = [msg]
            dist.broadcast_object_list(box, src=0)
            msg = box[0]
        return msg

    def event_loop(self) -> None:
        if self.world_size > 1:
            import torch.distributed as dist

            dist.barrier()  # every rank has its model before rank 0 reports ready
        info = self.ready_info()  # every rank joins the manifest gather
        if self.rank == 0:
            self.conn.send(("ready", info))
        while True:
            kind, rid, payload = self._next_message()
            if kind == "shutdown":
                break
            reply = self.handle(rid, payload) if kind == "generate" else ("error", rid, (None, f"unknown message {kind!r}"))
            if self.rank == 0:
                self.conn.send(reply)
        self.worker.shutdown()


def run_scheduler_process(server_args: ServerArgs, rank: int, conn: Any) -> None:
    """Entry of a scheduler child, reached through the bootstrap after hooks are applied.

    Called through this module's attribute, so a REPLACE hook on it takes effect.
    """
    Scheduler(server_args, rank, conn).event_loop()
