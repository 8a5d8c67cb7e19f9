from __future__ import annotations

import os

import pytest

import sglang
from helpers.reference import hf_fp32_model


@pytest.fixture(scope="session")
def engine():
    """One real engine (spawned scheduler + detokenizer) on the default model, fp32."""
    os.environ["SGLANG_QUIET_LOAD"] = "1"
    e = sglang.Engine(dtype="float32", log_level="warning")
    yield e
    e.shutdown()



@pytest.fixture(scope="session")
def hf_fp32():
    """Hugging Face transformers on the same GGUF, float32: the reference of the parity tests."""
    return hf_fp32_model()


@pytest.fixture(scope="session")
def tiny_tp_model(tmp_path_factory, engine):
    """A random Llama whose 4 heads / 2 KV heads split over two ranks, with the default tokenizer."""
    import json

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny-llama")
    cfg = LlamaConfig(vocab_size=49152, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=512, tie_word_embeddings=True)
    LlamaForCausalLM(cfg).save_pretrained(path, safe_serialization=True)
    engine.tokenizer_manager.tokenizer.backend.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>"}))
    return path


@pytest.fixture(scope="session")
def tiny_tp1_ids(tiny_tp_model):
    """Greedy output ids of the tiny model on one rank: what every scale-out layout must reproduce."""
    from helpers.scale_out import GREEDY, PROMPT_IDS

    with sglang.Engine(model_path=str(tiny_tp_model), dtype="float32", log_level="warning", max_total_tokens=2048) as e:
        return [r["output_ids"] for r in e.generate(input_ids=PROMPT_IDS, sampling_params=GREEDY)]
