"""Hugging Face directories: config.json + *.safetensors (+ tokenizer files)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.model_loader.errors import ModelLoadError
from sglang.srt.model_loader.progress import progress


def read_hf_dir(path: Path) -> tuple[ModelConfig, dict[str, Any]]:
    from safetensors.torch import load_file

    try:
        cfg_dict = json.loads((path / "config.json").read_text())
        cfg = ModelConfig.from_hf_dict(cfg_dict)
    except (KeyError, ValueError) as exc:
        raise ModelLoadError(f"{path / 'config.json'}: missing or invalid field {exc}") from exc
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise ModelLoadError(f"model directory {path} has no *.safetensors weights")
    tensors: dict[str, Any] = {}
    for f in progress(files, desc=f"Loading {path.name}"):
        try:
            tensors.update({k: v.float() for k, v in load_file(str(f)).items()})
        except Exception as exc:
            raise ModelLoadError(f"{f}: cannot read safetensors: {exc}") from exc
    return cfg, tensors
