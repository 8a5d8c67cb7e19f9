"""Diffusion ``ServerArgs``: built in the launcher, shipped to workers as opaque bytes.

Building one resolves ``current_platform`` and asks it for defaults
(``apply_server_args_defaults``, ``enable_dit_layerwise_offload_by_default``)
and for the device facts the launcher logs (name, total and available memory).
Unpickling one in a worker does not re-run this.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

DTYPES = ("float32", "bfloat16", "float16")


class DiffusionServerArgsError(ValueError):
    """A diffusion server argument is invalid; the message names the flag."""


@dataclass
class ServerArgs:
    model_path: str = "digits-dit"
    served_model_name: str | None = None
    dtype: str = "float32"
    attention_backend: str | None = None
    enable_torch_compile: bool = False
    dit_layerwise_offload: bool | None = None
    num_gpus: int = 1
    dist_port: int | None = None
    seed: int = 1024
    max_batch_size: int = 64
    host: str = "127.0.0.1"
    port: int = 30000
    api_key: str | None = field(default=None, repr=False)  # never in a log line or a traceback
    output_dir: str | None = None
    log_level: str = "info"
    device_info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from sglang.multimodal_gen.runtime.platforms import current_platform

        current_platform.apply_server_args_defaults(self)
        if self.dit_layerwise_offload is None:
            self.dit_layerwise_offload = bool(current_platform.enable_dit_layerwise_offload_by_default())
        if self.served_model_name is None:
            self.served_model_name = self.model_path
        self.device_info = {
            "device_name": current_platform.get_device_name(),
            "total_memory_gib": round(current_platform.get_device_total_memory() / (1 << 30), 2),
            "available_memory_gib": round(float(current_platform.get_available_gpu_memory()), 2),
        }
        self.check()

    def check(self) -> None:
        if self.dtype not in DTYPES:
            raise DiffusionServerArgsError(f"--dtype {self.dtype!r} is not supported; choose one of {', '.join(DTYPES)}")
        if self.attention_backend is not None:
            from sglang.multimodal_gen.runtime.layers.attention.backends import AttentionBackendEnum

            try:
                AttentionBackendEnum.parse(self.attention_backend)
            except ValueError as exc:
                raise DiffusionServerArgsError(str(exc)) from None
        if not 1 <= self.num_gpus <= 64:
            raise DiffusionServerArgsError(f"--num-gpus must be from 1 to 64, got {self.num_gpus}")
        if not 1 <= self.max_batch_size <= 4096:
            raise DiffusionServerArgsError(f"--max-batch-size must be from 1 to 4096, got {self.max_batch_size}")
        if not 0 <= self.port <= 65535:
            raise DiffusionServerArgsError(f"--port must be from 0 to 65535, got {self.port}")

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        p = parser.add_argument_group("diffusion")
        p.add_argument("--model-path", default="digits-dit", help="diffusion model directory or alias (default: digits-dit)")
        p.add_argument("--served-model-name", default=None)
        p.add_argument("--dtype", default="float32", choices=DTYPES)
        p.add_argument("--attention-backend", default=None, help="an AttentionBackendEnum name (TORCH_SDPA, NAIVE)")
        p.add_argument("--enable-torch-compile", action="store_true")
        p.add_argument("--dit-layerwise-offload", default=None, action=argparse.BooleanOptionalAction)
        p.add_argument("--num-gpus", type=int, default=1, help="workers; the image tokens are split across them (sequence parallel)")
        p.add_argument("--dist-port", type=int, default=None, help="port of the workers' process group (default: a free one)")
        p.add_argument("--seed", type=int, default=1024)
        p.add_argument("--max-batch-size", type=int, default=64)
        p.add_argument("--host", default="127.0.0.1")
        p.add_argument("--port", type=int, default=30000)
        p.add_argument("--api-key", default=None)
        p.add_argument("--output-dir", default=None)
        p.add_argument("--log-level", default="info")

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> ServerArgs:
        names = {f.name for f in dataclasses.fields(cls) if f.init and f.name != "device_info"}
        return cls(**{k: v for k, v in vars(args).items() if k in names})

    def log_summary(self) -> None:
        logger.info("diffusion server args: %s", {f.name: getattr(self, f.name) for f in dataclasses.fields(self)})
