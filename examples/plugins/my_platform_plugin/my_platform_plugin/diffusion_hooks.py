"""Hooks the platform ships for what the Platform interface does not cover."""

from __future__ import annotations

import logging
from typing import Any

from sglang.multimodal_gen.runtime.platforms.plugins import HookType, plugin_hook

logger = logging.getLogger("my_platform_plugin")
TARGET = "sglang.multimodal_gen.runtime.managers.gpu_worker.GPUWorker.init_device_and_model"


def register() -> None:
    @plugin_hook(TARGET, type=HookType.BEFORE)
    def before_init(worker: Any, *args: Any, **kwargs: Any) -> None:
        logger.warning("my_device: preparing rank %d", worker.rank)

    @plugin_hook(TARGET, type=HookType.AROUND)
    def around_init(original_fn: Any, worker: Any, *args: Any, **kwargs: Any) -> Any:
        result = original_fn(worker, *args, **kwargs)
        worker.info["my_device_ready"] = True
        logger.warning("my_device: rank %d initialized", worker.rank)
        return result
