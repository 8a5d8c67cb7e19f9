"""``GPUWorker``: binds a device, joins the process group, builds the pipeline, runs it.

``GPUWorker.init_device_and_model`` is the hook target the spec names for
rank-aware initialization: BEFORE/AROUND hooks there run before the device is
bound and the model is built.
"""

from __future__ import annotations

import datetime
import logging
import time
from typing import TYPE_CHECKING, Any

import torch

from sglang.multimodal_gen.runtime.pipelines.outputs import DiffusionOutput
from sglang.multimodal_gen.runtime.pipelines.sampling_params import SamplingParams

if TYPE_CHECKING:
    from sglang.multimodal_gen.runtime.server_args import ServerArgs

logger = logging.getLogger(__name__)


class GPUWorker:
    """One rank of the diffusion runtime; built and driven by the ``Scheduler``."""

    def __init__(self, server_args: ServerArgs, rank: int = 0, local_rank: int = 0, world_size: int = 1, dist_port: int | None = None) -> None:
        self.server_args = server_args
        self.rank, self.local_rank, self.world_size, self.dist_port = rank, local_rank, world_size, dist_port
        self.device: torch.device | None = None
        self.pipeline: Any = None
        self.info: dict[str, Any] = {}

    def init_device_and_model(self) -> None:
        from sglang.multimodal_gen.runtime.loader.model_loader import load_pipeline
        from sglang.multimodal_gen.runtime.platforms import current_platform as plat

        self.device = plat.get_device(self.local_rank)
        plat.set_device(self.device)
        cap = plat.get_device_capability(self.local_rank)
        self.info = {
            "device": str(self.device),
            "local_device": str(plat.get_local_torch_device()),
            "device_name": plat.get_device_name(self.local_rank),
            "device_uuid": plat.get_device_uuid(self.local_rank),
            "capability": cap.as_version_str() if cap else None,
            "available_memory_gib": round(float(plat.get_available_gpu_memory(self.local_rank)), 2),
            "cpu_architecture": plat.get_cpu_architecture().name,
        }
        self._init_distributed(plat)
        plat.seed_everything(self.server_args.seed)
        t0 = time.perf_counter()
        self.pipeline = load_pipeline(self.server_args, self.device)
        self.info["load_seconds"] = round(time.perf_counter() - t0, 3)
        self.info["dispatch"] = sorted({m.dispatch_source for m in self.pipeline.transformer.modules() if hasattr(m, "dispatch_source")})
        logger.info("GPUWorker rank %d ready on %s: %s", self.rank, self.device, self.info)

    def _init_distributed(self, plat: Any) -> None:
        import torch.distributed as dist

        from sglang.multimodal_gen.runtime.distributed.communication import init_sequence_parallel

        backend = plat.get_torch_distributed_backend_str()
        kwargs: dict[str, Any] = {}
        if plat.supports_distributed_device_id() and self.device is not None and self.device.type != "cpu":
            kwargs["device_id"] = self.device
        self.info["distributed_backend"] = backend
        self.info["distributed_device_id"] = "device_id" in kwargs
        if self.world_size > 1 and not dist.is_initialized():
            from sglang.utils.dist_store import bound_store

            timeout = datetime.timedelta(seconds=600)
            store = bound_store(f"tcp://127.0.0.1:{self.dist_port}", self.world_size, self.rank, timeout)  # loopback only
            dist.init_process_group(backend, store=store, world_size=self.world_size, rank=self.rank, timeout=timeout, **kwargs)
        init_sequence_parallel(self.world_size, self.rank, dist.group.WORLD if dist.is_initialized() else None)

    def execute_forward(self, params: SamplingParams) -> list[DiffusionOutput]:
        """Draw every image ``params`` asks for, in chunks of ``max_batch_size``."""
        cfg = self.pipeline.config
        params.validate(cfg.dit.image_size, cfg.default_num_inference_steps)
        prompts = params.prompts()
        labels = [cfg.class_for_prompt(p) for p in prompts]
        seeds = params.seeds(len(prompts))
        steps = params.num_inference_steps or cfg.default_num_inference_steps
        guidance = float(cfg.default_guidance_scale if params.guidance_scale is None else params.guidance_scale)
        out: list[DiffusionOutput] = []
        bs = self.server_args.max_batch_size
        for i in range(0, len(prompts), bs):
            pixels = self.pipeline(labels[i : i + bs], seeds[i : i + bs], steps, guidance).numpy()
            for j, img in enumerate(pixels):
                k = i + j
                out.append(DiffusionOutput(prompts[k], labels[k], seeds[k], img.astype("float32"), steps, guidance, params.size))
        return out

    def shutdown(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
