"""The default GGUF arithmetic served end to end: the measured plan of ``cpu_kernels/isa.py`` for this CPU (int8
for some layers where it measured faster and kept the quality bar), not the float32 the rest of the suite pins
(tests/conftest.py). What the engine runs, and its greedy answers on the test prompts."""

from __future__ import annotations

import os

import pytest

import sglang
from sglang.host import cpu_model
from sglang.srt.layers.cpu_kernels.isa import MathPlan, auto_kv_dtype, gguf_math, host_choice

PROMPTS = ["What is the capital of France?", "Write a haiku about the sea.", "List three primary colors.", "What is 12 times 12?"]
GREEDY = {"temperature": 0, "max_new_tokens": 12}
# what each arithmetic gives the default model's 30 layers x (qkv, o, gate_up, down) and its tied head
SUMMARY = {"float32": "120 x q4_f32; 1 x q8_f32", "mixed": "60 x q4_f32; 60 x q4_i8; 1 x q8_f32", "mixed16": "60 x q4_i16; 60 x q4_i8; 1 x q8_i8",
           "int8": "120 x q4_i8; 1 x q8_i8"}


def default_plan() -> MathPlan:
    return gguf_math(host_choice().family.name, cpu_model(), None)


@pytest.fixture(scope="module")
def engine():
    pinned = os.environ.pop("SGLANG_CPU_GGUF_MATH", None)  # the engine's processes inherit the environment at start
    try:
        e = sglang.Engine(log_level="warning", max_total_tokens=4096)
    finally:
        if pinned is not None:
            os.environ["SGLANG_CPU_GGUF_MATH"] = pinned
    yield e
    e.shutdown()


def _ids(engine, text):
    tok = engine.tokenizer_manager.tokenizer
    return tok.encode(tok.apply_chat_template([{"role": "user", "content": text}]))


def test_the_engine_runs_the_measured_plan_for_this_cpu(engine):
    plan = default_plan()
    fmt = engine.info["weight_format"]
    assert engine.info["kv_cache_dtype"] == auto_kv_dtype(plan)  # bfloat16 unless float32 runs at every batch size
    if len(set(plan.by_bucket)) == 1:
        assert fmt == SUMMARY[plan.by_bucket[0]]
    else:  # layers whose arithmetic changes between buckets hold both kernels
        assert any(f"q4_{a} (<= " in fmt for a in ("f32", "i8", "i16"))


def test_the_defaults_greedy_answers_on_the_test_prompts(engine):
    ids = [_ids(engine, p) for p in PROMPTS[:4]]
    single = [engine.generate(input_ids=i, sampling_params=GREEDY)["output_ids"] for i in ids]
    batched = [r["output_ids"] for r in engine.generate(input_ids=ids, sampling_params=GREEDY)]
    text = [engine.tokenizer_manager.tokenizer.decode(o) for o in single]
    assert "Paris" in text[0] and "12" in text[3] and all(len(o) > 4 for o in single + batched)
    if set(default_plan().by_bucket) == {"float32"}:
        # the exact weights at every batch size: a request's answer does not depend on what it is batched with
        # (with int8 activations it may: cpu_kernels/isa.py, the comment above HELD)
        assert batched == single
