"""SGLang Diffusion facade.

Import-safe at module scope: ``DiffGenerator`` here is a lazy proxy, so::

    from sglang.multimodal_gen import DiffGenerator   # imports nothing of the runtime

    if __name__ == "__main__":
        generator = DiffGenerator.from_pretrained(model_path="digits-dit")

costs nothing until used, and every ``spawn`` child (which re-runs the
script's module scope) reaches ``initialize_current_platform()`` with a clean
module table. ``SamplingParams``, ``PipelineConfig`` and ``ServerArgs`` load
the runtime on first use: keep them under the ``__main__`` guard or inside
the function that uses them.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "SamplingParams": "sglang.multimodal_gen.runtime.pipelines.sampling_params",
    "PipelineConfig": "sglang.multimodal_gen.runtime.pipelines.pipeline_config",
    "ServerArgs": "sglang.multimodal_gen.runtime.server_args",
    "DiffusionOutput": "sglang.multimodal_gen.runtime.pipelines.outputs",
}


class _DiffGeneratorProxy:
    """Stands in for ``DiffGenerator`` until an attribute is used or it is called."""

    _target = ("sglang.multimodal_gen.runtime.entrypoints.diffusion_generator", "DiffGenerator")

    def _resolve(self) -> Any:
        module, name = self._target
        return getattr(importlib.import_module(module), name)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._resolve(), name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._resolve()(*args, **kwargs)

    def __instancecheck__(self, obj: Any) -> bool:
        return isinstance(obj, self._resolve())

    def __repr__(self) -> str:
        return "<lazy sglang.multimodal_gen.DiffGenerator>"


DiffGenerator: Any = _DiffGeneratorProxy()


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["DiffGenerator", "DiffusionOutput", "PipelineConfig", "SamplingParams", "ServerArgs"]
