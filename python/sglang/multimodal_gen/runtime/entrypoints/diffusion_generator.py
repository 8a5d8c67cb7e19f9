"""``DiffGenerator``: the offline API of the diffusion runtime.

    from sglang.multimodal_gen import DiffGenerator

    if __name__ == "__main__":
        gen = DiffGenerator.from_pretrained(model_path="digits-dit")
        images = gen.generate(prompt="a handwritten digit 7", seed=0, output_path="out/")
        gen.shutdown()

The generator applies diffusion hooks in this (launcher) process, builds
``ServerArgs`` and starts the scheduler in a ``spawn`` child through the
import-neutral bootstrap; requests travel over a pipe.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sglang.multimodal_gen.runtime.entrypoints.client import SchedulerClient
from sglang.multimodal_gen.runtime.pipelines.outputs import DiffusionOutput
from sglang.multimodal_gen.runtime.pipelines.sampling_params import SamplingParams
from sglang.utils.lifecycle import Closing

if TYPE_CHECKING:
    from sglang.multimodal_gen.runtime.server_args import ServerArgs

logger = logging.getLogger(__name__)


class DiffGenerator(Closing):
    """A running diffusion scheduler and a client to it. Use as a context manager or call ``shutdown()``."""

    def __init__(self, server_args: ServerArgs) -> None:
        from sglang.multimodal_gen.runtime.managers.launcher import (
            check_scheduler_manifests,
            launcher_manifest,
            spawn_schedulers,
            stop_processes,
            wait_ready,
        )
        from sglang.multimodal_gen.runtime.managers.worker_bootstrap import launcher_bootstrap

        launcher_bootstrap()  # the launcher's own hooks (once per process), the manifest the children must match
        self.server_args = server_args
        self._procs, conn = spawn_schedulers(server_args)
        try:
            self.info = wait_ready(self._procs, conn)
            check_scheduler_manifests(self.info, launcher_manifest())
        except BaseException:
            stop_processes(self._procs, grace=0.0)
            raise
        self._client = SchedulerClient(conn, self._procs)
        logger.info("diffusion scheduler ready (%d rank(s)) on %s", len(self._procs), self.info.get("platform"))

    @classmethod
    def from_pretrained(cls, model_path: str | None = None, **kwargs: Any) -> DiffGenerator:
        """Start a generator for ``model_path`` (a directory or the alias ``digits-dit``).

        ``kwargs`` are diffusion ``ServerArgs`` fields (``dtype``,
        ``attention_backend``, ``enable_torch_compile``, ...).
        """
        from sglang.multimodal_gen.runtime.managers.worker_bootstrap import launcher_bootstrap
        from sglang.multimodal_gen.runtime.server_args import ServerArgs

        launcher_bootstrap()
        if model_path is not None:
            kwargs["model_path"] = model_path
        return cls(ServerArgs(**kwargs))

    def generate(
        self,
        prompt: str | list[str] = "",
        num_inference_steps: int | None = None,
        guidance_scale: float | None = None,
        seed: int | list[int] | None = None,
        num_images_per_prompt: int = 1,
        size: int | None = None,
        output_path: str | Path | None = None,
        sampling_params: SamplingParams | None = None,
        timeout: float | None = None,
    ) -> list[DiffusionOutput]:
        """Draw images; one :class:`DiffusionOutput` per image, in prompt order.

        With ``output_path`` (a directory) each image is also saved as
        ``<index>_<label>_<seed>.png`` there; ``output.path`` is set.
        """
        params = sampling_params or SamplingParams(prompt, num_images_per_prompt, num_inference_steps, guidance_scale, seed, size)
        outputs = self._client.generate(params, timeout)
        target = output_path or self.server_args.output_dir
        if target is not None:
            for i, out in enumerate(outputs):
                label = "uncond" if out.label is None else out.label
                out.path = str(out.save(Path(target) / f"{i:03d}_{label}_{out.seed}.png"))
        return outputs

    def shutdown(self) -> None:
        """Stop the scheduler child (idempotent)."""
        client = getattr(self, "_client", None)
        if client is not None:
            client.close()
        procs = getattr(self, "_procs", None)
        if procs:
            from sglang.multimodal_gen.runtime.managers.launcher import stop_processes

            stop_processes(procs, grace=10.0)

