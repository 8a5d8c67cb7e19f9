"""Reading what a model's files say about sampling (``--sampling-defaults model``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sglang.srt.configs.generation_config import ModelGeneration
from sglang.srt.model_loader.errors import ModelLoadError


def read_model_generation(path: Path, gguf_info: dict[str, Any] | None = None) -> ModelGeneration:
    """A model directory's ``generation_config.json``, or a GGUF's metadata (``gguf_info``: its already-read
    tokenizer metadata, which carries it). A directory's identity is its config's ``_name_or_path``."""
    if path.is_dir():
        gen, cfg = path / "generation_config.json", path / "config.json"
        try:
            sampling = json.loads(gen.read_text()) if gen.is_file() else {}
            name = json.loads(cfg.read_text()).get("_name_or_path") if cfg.is_file() else None
        except (OSError, ValueError) as exc:
            raise ModelLoadError(f"{gen if gen.is_file() else cfg} is not readable JSON: {exc}") from exc
        if not isinstance(sampling, dict):
            raise ModelLoadError(f"{gen} must hold a JSON object")
        return ModelGeneration(name if isinstance(name, str) else None, sampling, str(gen))
    if gguf_info is None:
        from sglang.srt.model_loader.gguf_loader import read_gguf_tokenizer

        gguf_info = read_gguf_tokenizer(path)
    gen_info = gguf_info.get("generation") or {}
    return ModelGeneration(gen_info.get("identity"), dict(gen_info.get("sampling") or {}), f"{path} (general.sampling.*)")
