"""The training script of the shipped model is reproducible, and its output loads."""

from __future__ import annotations

import json

import torch
from safetensors.torch import load_file

from sglang.multimodal_gen.runtime.loader.paths import ALIASES
from sglang.multimodal_gen.runtime.models.digits_dit import DigitsDiT
from sglang.multimodal_gen.runtime.pipelines.pipeline_config import PipelineConfig
from sglang.multimodal_gen.training.train_digits import train


def test_same_seed_gives_the_same_weights_and_training_lowers_the_loss(tmp_path, capsys):
    threads = torch.get_num_threads()
    try:
        a = train(tmp_path / "a", steps=30, batch_size=32, lr=1e-3, seed=7, threads=1, p_uncond=0.15)
        b = train(tmp_path / "b", steps=30, batch_size=32, lr=1e-3, seed=7, threads=1, p_uncond=0.15)
    finally:
        torch.set_num_threads(threads)
    wa, wb = load_file(str(tmp_path / "a" / "model.safetensors")), load_file(str(tmp_path / "b" / "model.safetensors"))
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    assert a["final_loss"] == b["final_loss"] and a["final_loss"] < 1.0  # noise alone scores 1.0
    assert 0.6e6 < a["params"] < 0.8e6


def test_shipped_model_matches_the_code_and_stays_small():
    shipped = ALIASES["digits-dit"]
    assert json.loads((shipped / "pipeline_config.json").read_text()) == PipelineConfig().to_dict()
    assert (shipped / "model.safetensors").stat().st_size < 5 * 1024 * 1024
    model = DigitsDiT(PipelineConfig().dit)
    state = load_file(str(shipped / "model.safetensors"))
    model.load_state_dict(state)  # strict: every tensor present with its shape
