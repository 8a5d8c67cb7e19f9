"""Answer quality of each configuration against the float32 reference, beside its speed.

Run: .venv/bin/python bench/quality.py [--configs default,float32+none,bfloat16+gguf_q4,bfloat16+none] [--tokens 64]

A config may end in ``@float32`` or ``@int8``: the GGUF kernels' arithmetic (``SGLANG_CPU_GGUF_MATH``) for it.

The reference (``--dtype float32 --quantization none``) answers a fixed set of chat prompts greedily;
every configuration then reads the same token sequences (teacher forcing: a prefill of the prompt,
then a decode step per answer token fed the reference's token, in batches of 8, so the decode kernels a
configuration serves with are the ones scored) and, at each answer position, is scored by whether its top-1 token is the reference's (agreement) and by the KL divergence
of its next-token distribution from the reference's, KL(reference || config), in nats per token.
Speed: greedy decode tokens/s of the in-process scheduler at batch 1 and 16. Everything runs in this
one process, one scheduler at a time (what ``sglang serve`` would build for those flags). Target for the
default configuration: top-1 agreement >= 98%.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from helpers.inproc import generate_ids

PROMPTS = [
    "What is the capital of France?", "Write a haiku about the sea.", "List three colors.", "What is 2+2?",
    "Explain photosynthesis in one sentence.", "Give me a synonym for happy.", "Who wrote Hamlet?",
    "Translate 'good morning' into Spanish.", "Name a planet in our solar system.", "What do bees make?",
    "Describe a cat in five words.", "Why is the sky blue?", "Suggest a name for a dog.", "What is the boiling point of water?",
    "Tell me a fun fact about octopuses.", "How many days are in a week?",
]


def parse(config: str) -> dict[str, Any]:
    """``default`` (no flags), or ``DTYPE[+QUANT]``: ``float32+none`` dequantizes, ``bfloat16+gguf_q4`` keeps Q4 blocks
    (a bare ``DTYPE`` leaves ``--quantization`` at its default, ``auto``)."""
    if config == "default":
        return {}
    dtype, _, quant = config.partition("+")
    return {"dtype": dtype, **({"quantization": quant} if quant else {})}


def build(flags: dict[str, Any]) -> Any:
    from inproc_scheduler import scheduler  # bench/ is the script's directory

    return scheduler(max_total_tokens=16384, **flags)


def answer_logprobs(s: Any, group: list[tuple[list[int], int]]) -> Any:
    """Log-softmax ``[n, answer length, V]`` (float32) of the rows predicting each sequence's answer ``seq[start:]``,
    computed the way serving computes them: one prefill of the prompts, then one decode step per answer token
    with the reference's token as input (``group`` of at most 8 sequences: the packed-Q4 kernels' batch)."""
    import torch

    from sglang.srt.model_executor.forward_batch_info import ForwardMode, ModelWorkerBatch

    runner = s.tp_worker.model_runner
    n, ps = len(group), runner.kv_pool.page_size
    length = len(group[0][0]) - group[0][1]
    pages = [runner.allocator.alloc(-(-len(seq) // ps)) for seq, _ in group]
    try:
        rows = [runner.forward(ModelWorkerBatch(ForwardMode.EXTEND, [seq[:start] for seq, start in group], [0] * n, pages, [None] * n))]
        for i in range(length - 1):
            b = ModelWorkerBatch(ForwardMode.DECODE, [[seq[start + i]] for seq, start in group], [start + i for _, start in group], pages,
                                 [None] * n)
            rows.append(runner.forward(b))
        return torch.log_softmax(torch.stack(rows, 1).float(), -1)
    finally:
        for p in pages:
            runner.allocator.free(p)


GROUP = 8


def groups(seqs: list[tuple[list[int], int]]) -> list[list[tuple[list[int], int]]]:
    return [seqs[i : i + GROUP] for i in range(0, len(seqs), GROUP)]


def speed(s: Any, prompts: list[list[int]], tokens: int) -> tuple[float, float]:
    out = []
    for batch in (prompts[:1], prompts[:16]):
        generate_ids(s, batch, 4)  # warm
        t0 = time.perf_counter()
        got = generate_ids(s, batch, tokens)
        out.append(sum(map(len, got)) / (time.perf_counter() - t0))
    return out[0], out[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", default="default,float32+none,bfloat16+gguf_q4,bfloat16+none")
    ap.add_argument("--tokens", type=int, default=64)
    a = ap.parse_args()
    os.environ.setdefault("SGLANG_QUIET_LOAD", "1")
    logging.basicConfig(level=logging.WARNING)
    import torch

    from sglang.srt.runtime_context import get_context

    torch.manual_seed(0)
    rows = []
    with get_context().preserve_config():
        ref = build({"dtype": "float32", "quantization": "none"})
        prompts = [ref.tokenizer.encode(ref.tokenizer.apply_chat_template([{"role": "user", "content": p}])) for p in PROMPTS]
        answers = generate_ids(ref, prompts, a.tokens)
        seqs = [(p + ans, len(p)) for p, ans in zip(prompts, answers)]
        reference = [answer_logprobs(ref, g) for g in groups(seqs)]
        rows.append(("float32 reference", 1.0, 0.0, *speed(ref, prompts, a.tokens)))
        del ref
    from inproc_scheduler import gguf_math

    for config in a.configs.split(","):
        with get_context().preserve_config(), gguf_math(config) as flags:
            s = build(parse(flags))
            agree = total = 0
            kl = 0.0
            for g, want in zip(groups(seqs), reference):
                got = answer_logprobs(s, g)
                agree += int((got.argmax(-1) == want.argmax(-1)).sum())
                total += want.shape[0] * want.shape[1]
                kl += float((want.exp() * (want - got)).sum())  # >= 0 up to float rounding
            rows.append((config, agree / total, max(kl / total, 0.0), *speed(s, prompts, a.tokens)))
            del s
    print(f"{len(PROMPTS)} prompts x {a.tokens} answer tokens, teacher-forced on the float32 reference's answers")
    print(f"{'configuration':>20} {'top-1 agree':>11} {'KL nats/tok':>11} {'tok/s b=1':>9} {'tok/s b=16':>10}")
    for name, agree_frac, kl_tok, s1, s16 in rows:
        print(f"{name:>20} {100 * agree_frac:>10.2f}% {kl_tok:>11.5f} {s1:>9.1f} {s16:>10.1f}")


if __name__ == "__main__":
    sys.exit(main())
