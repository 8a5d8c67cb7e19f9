"""Diffusion model paths and aliases (no torch: ``sglang serve`` reads this to pick a runtime)."""

from __future__ import annotations

from pathlib import Path

ASSETS = Path(__file__).resolve().parents[2] / "assets"
ALIASES = {"digits-dit": ASSETS / "digits-dit"}


class DiffusionModelLoadError(ValueError):
    """The model path, its config or its weights cannot be used; the message names which."""


def resolve_model_path(model_path: str) -> Path:
    """An alias (``digits-dit``) or a directory holding ``pipeline_config.json``."""
    if model_path in ALIASES:
        return ALIASES[model_path]
    p = Path(model_path).expanduser()
    if not p.is_dir():
        raise DiffusionModelLoadError(
            f"diffusion model path {model_path!r} is neither a directory nor a known alias ({', '.join(ALIASES)}); "
            "pass --model-path with a directory holding pipeline_config.json and model.safetensors"
        )
    return p


def is_diffusion_model_path(model_path: str | None) -> bool:
    """Whether ``sglang serve`` should start the diffusion runtime for this path."""
    if not model_path:
        return False
    if model_path in ALIASES:
        return True
    p = Path(model_path).expanduser()
    return p.is_dir() and (p / "pipeline_config.json").is_file()
