"""Model loading: GGUF files and Hugging Face directories into a torch model."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.model_loader.errors import ModelLoadError
from sglang.srt.model_loader.paths import resolve_model_path


@dataclass
class LoadedWeights:
    path: Path
    config: ModelConfig
    tensors: dict[str, Any]
    tokenizer_info: dict[str, Any] | None  # GGUF-embedded tokenizer, else None
    packed_q4: dict[str, Any] | None = None  # GGUF Q4 blocks when asked for (keep_q4)
    embed_q8: Any = None  # a GGUF's Q8_0 token embedding as (int8 values, float32 scales), else None

    def materialize(self) -> None:
        """Dequantize every lazily read tensor now (``read_gguf(keep_q4=True)`` defers it to ``.to``), for a
        model class that may treat the tensors as tensors. Who calls: the model runner, for models that do not
        declare ``packed_modules_mapping`` (this project's models read each tensor once, through ``.to``)."""
        import torch

        self.tensors = {k: v if isinstance(v, torch.Tensor) else v.to(torch.float32) for k, v in self.tensors.items()}


# the weight formats this loader reads (upstream's --load-format names); ``auto``: from the path
LOAD_FORMATS = ("auto", "gguf", "safetensors")


def read_weights(model_path: str, keep_q4: bool = False, load_format: str = "auto") -> LoadedWeights:
    """``model_path``'s config, tensors and tokenizer; ``load_format`` other than ``auto`` must match what the path holds."""
    path = resolve_model_path(model_path)
    if load_format not in LOAD_FORMATS:
        raise ModelLoadError(f"load format {load_format!r} is not one this loader reads; use one of {list(LOAD_FORMATS)}")
    found = "gguf" if path.is_file() else "safetensors"
    if load_format not in ("auto", found):
        raise ModelLoadError(f"load format {load_format} does not match {path}, which holds {found} weights: use {found} or auto")
    if path.is_file():
        from sglang.srt.model_loader.gguf_loader import read_gguf

        cfg, tensors, tok, packed, embed_q8 = read_gguf(path, keep_q4)
        return LoadedWeights(path, cfg, tensors, tok, packed, embed_q8)
    if keep_q4:
        raise ModelLoadError(f"--quantization gguf_q4 keeps a GGUF's packed weights; {path} is a directory, not a .gguf file")
    from sglang.srt.model_loader.hf_loader import read_hf_dir

    cfg, tensors = read_hf_dir(path)
    return LoadedWeights(path, cfg, tensors, None)


__all__ = ["LOAD_FORMATS", "LoadedWeights", "ModelLoadError", "read_weights", "resolve_model_path"]
