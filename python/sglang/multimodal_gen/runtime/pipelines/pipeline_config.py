"""``PipelineConfig``: what a diffusion model directory's ``pipeline_config.json`` holds."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from sglang.multimodal_gen.runtime.models.digits_dit import DiTConfig

_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


class PipelineConfigError(ValueError):
    """A model directory's pipeline config is missing or malformed."""


@dataclass(frozen=True)
class PipelineConfig:
    """Architecture, noise schedule and defaults of a class-conditional pipeline."""

    architecture: str = "DigitsDiT"
    dit: DiTConfig = field(default_factory=DiTConfig)
    num_train_timesteps: int = 1000
    schedule: str = "cosine"
    prediction: str = "epsilon"
    default_num_inference_steps: int = 25
    default_guidance_scale: float = 3.0
    class_names: tuple[str, ...] = tuple(str(i) for i in range(10))
    prompt_template: str = "a handwritten digit {label}"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["class_names"] = list(self.class_names)
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "pipeline config") -> PipelineConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise PipelineConfigError(f"{where}: unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        data = dict(data)
        if "dit" in data:
            dit_known = {f.name for f in fields(DiTConfig)}
            bad = sorted(set(data["dit"]) - dit_known)
            if bad:
                raise PipelineConfigError(f"{where}: unknown dit field(s) {', '.join(bad)}")
            data["dit"] = DiTConfig(**data["dit"])
        if "class_names" in data:
            data["class_names"] = tuple(data["class_names"])
        return cls(**data)

    @classmethod
    def from_pretrained(cls, model_dir: str | Path) -> PipelineConfig:
        path = Path(model_dir) / "pipeline_config.json"
        if not path.is_file():
            raise PipelineConfigError(f"{path} not found: a diffusion model directory holds pipeline_config.json and model.safetensors")
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise PipelineConfigError(f"{path} is not valid JSON: {exc}") from exc
        return cls.from_dict(data, str(path))

    def class_for_prompt(self, prompt: str) -> int | None:
        """The class a prompt asks for; ``None`` for an empty prompt (unconditional).

        Accepts a digit ("a handwritten digit 7") or its English word ("seven").
        A prompt that names no class, or several different ones, is an error.
        """
        text = prompt.strip().lower()
        if not text:
            return None
        found = {int(m) for m in re.findall(r"(?<![\d.])(\d)(?![\d.])", text)}
        found |= {i for i, w in enumerate(_WORDS) if re.search(rf"\b{w}\b", text)}
        found = {i for i in found if i < len(self.class_names)}
        if len(found) != 1:
            what = "no digit" if not found else f"several digits ({', '.join(map(str, sorted(found)))})"
            raise ValueError(
                f"{prompt!r} names {what}; this model draws one class per image: ask for e.g. "
                f"{self.prompt_template.format(label=7)!r}, or send an empty prompt for an unconditional sample"
            )
        return found.pop()
