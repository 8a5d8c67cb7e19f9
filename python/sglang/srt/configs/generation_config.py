"""The sampling defaults a request's missing fields take: ``--sampling-defaults`` and ``--preferred-sampling-params``.

Layers, first wins, per field: the request's own value (an explicit ``temperature: 1.0`` included),
``--preferred-sampling-params``, the model's defaults (``--sampling-defaults model``, the default),
then ``SamplingParams``'s own (the OpenAI defaults: temperature 1, top_p 1). The model's defaults are
upstream's five keys from its ``generation_config.json`` (a GGUF: its ``general.sampling.*`` keys);
a model whose files carry none but whose card recommends values is listed in ``MODEL_CARD_DEFAULTS``.
The tokenizer manager applies the layers to every request (``sglang.Engine``, ``/generate`` and
both OpenAI routes), so "not sent" is told from "sent with the default value".
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from sglang.srt.sampling.sampling_params import LIMITS, SamplingParamsError

logger = logging.getLogger(__name__)

# upstream's ModelConfig.get_default_sampling_params: the generation-config keys that become defaults
SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")
# llama.cpp's GGUF metadata for the same (what its converter writes from generation_config.json)
GGUF_SAMPLING_KEYS = {"general.sampling.temp": "temperature", "general.sampling.top_p": "top_p", "general.sampling.top_k": "top_k",
                      "general.sampling.min_p": "min_p", "general.sampling.penalty_repeat": "repetition_penalty"}


@dataclass(frozen=True)
class CardDefaults:
    model: str  # the model as its authors publish it
    card: str  # where the values are written
    sampling: dict[str, float | int]


# A model's identity (a GGUF's "general.organization/general.name") -> the values its card recommends, for models
# whose files carry no generation config. The default model's GGUF has none, and its Hugging Face
# generation_config.json names no sampling values; its card's usage example samples at 0.2 / 0.9.
MODEL_CARD_DEFAULTS: dict[str, CardDefaults] = {
    "HuggingFaceTB/Smollm2 135M 8k Lc100K Mix1 Ep2": CardDefaults(
        "HuggingFaceTB/SmolLM2-135M-Instruct", "https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct (model card, usage example)",
        {"temperature": 0.2, "top_p": 0.9}),
}


@dataclass(frozen=True)
class ModelGeneration:
    """What a model's files say about sampling: its identity and the values its generation config holds."""

    identity: str | None = None
    sampling: dict[str, Any] = field(default_factory=dict)
    source: str = ""  # the file the values come from, for logs

    def defaults(self) -> dict[str, Any]:
        """The model's defaults: its card's values under its files' own (valid ones only, upstream's five keys)."""
        card = MODEL_CARD_DEFAULTS.get(self.identity or "")
        out = {**(card.sampling if card else {}), **{k: v for k, v in self.sampling.items() if k in SAMPLING_KEYS}}
        for k, v in list(out.items()):
            try:
                LIMITS[k].check(k, v)
            except SamplingParamsError as exc:  # a file's value this engine refuses would fail every request: skip it
                logger.warning("ignoring the model's default %s=%r (%s): %s", k, v, self.source or "model files", exc)
                del out[k]
        return out


def preferred_sampling_params(value: str | dict[str, Any] | None) -> dict[str, Any]:
    """``--preferred-sampling-params`` as a dict (JSON text or a dict; unset: empty). ValueError names what is wrong."""
    if value is None:
        return {}
    parsed = json.loads(value) if isinstance(value, str) else value
    if not isinstance(parsed, dict):
        raise ValueError(f"must be a JSON object, got {type(parsed).__name__}")
    return dict(parsed)


def request_defaults(model: ModelGeneration | None, preferred: str | dict[str, Any] | None) -> dict[str, Any]:
    """The defaults a request's missing fields take: ``preferred`` over the model's (``None`` under
    ``--sampling-defaults openai``); see the module docstring for the whole order."""
    return {**(model.defaults() if model is not None else {}), **preferred_sampling_params(preferred)}


def with_defaults(sampling_params: Any, defaults: dict[str, Any]) -> Any:
    """``sampling_params`` with every field it does not send (absent or ``null``) taken from ``defaults``; anything
    that is not a dict is returned as is, for ``SamplingParams.from_dict`` to refuse by name."""
    if not defaults or not (sampling_params is None or isinstance(sampling_params, dict)):
        return sampling_params
    return {**defaults, **{k: v for k, v in (sampling_params or {}).items() if v is not None}}
