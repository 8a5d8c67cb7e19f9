"""Answer quality of each configuration against the float32 reference, beside its speed.

Run: .venv/bin/python bench/quality.py [--configs default,float32+none,bfloat16+gguf_q4,bfloat16+none] [--tokens 64]

A config may end in ``/kv=bfloat16`` (``--kv-cache-dtype``), then in ``@float32``, ``@mixed`` or ``@int8``: the GGUF kernels' arithmetic (``SGLANG_CPU_GGUF_MATH``)
forced at every batch size for it (plain ``default`` runs what ``cpu_kernels/isa.py`` picks per batch size).

The reference (``--dtype float32 --quantization none``) answers a fixed set of chat prompts greedily;
every configuration then reads the same token sequences (teacher forcing: a prefill of the prompt,
then a decode step per answer token fed the reference's token, in batches of ``--group`` (8), so the decode
kernels a configuration serves with at that batch size are the ones scored) and, at each answer position, is scored by whether its top-1 token is the reference's (agreement) and by the KL divergence
of its next-token distribution from the reference's, KL(reference || config), in nats per token.
A ``llama.cpp`` row scores llama.cpp itself on the same token ids (``llama-cpp-python`` with
``logits_all=True``: one evaluation per sequence gives every position's logits; speed not measured) when that
package is installed here or in the interpreter ``$LLAMA_CPP_PYTHON`` names (how to build it: ``bench/serving.py``).
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
    (a bare ``DTYPE`` leaves ``--quantization`` at its default, ``auto``); either may end in ``/kv=DTYPE``
    (``--kv-cache-dtype``)."""
    config, _, kv = config.partition("/kv=")
    flags: dict[str, Any] = {"kv_cache_dtype": kv} if kv else {}
    if config == "default":
        return flags
    dtype, _, quant = config.partition("+")
    return {"dtype": dtype, **({"quantization": quant} if quant else {}), **flags}


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


def groups(seqs: list[tuple[list[int], int]], group: int = GROUP) -> list[list[tuple[list[int], int]]]:
    return [seqs[i : i + group] for i in range(0, len(seqs), group)]


def speed(s: Any, prompts: list[list[int]], tokens: int) -> tuple[float, float]:
    out = []
    for batch in (prompts[:1], prompts[:16]):
        generate_ids(s, batch, 4)  # warm
        t0 = time.perf_counter()
        got = generate_ids(s, batch, tokens)
        out.append(sum(map(len, got)) / (time.perf_counter() - t0))
    return out[0], out[1]


LLAMA_CPP_SCRIPT = """
import json, sys
import numpy as np
from llama_cpp import Llama
model, seqs_path, out_path = sys.argv[1:4]
seqs = json.load(open(seqs_path))
llm = Llama(model_path=model, logits_all=True, n_ctx=max(len(s) for s, _ in seqs) + 8, n_threads=2, verbose=False)
rows = []
for seq, start in seqs:
    llm.reset()
    llm.eval(seq)
    # scores[j]: the logits after token j, predicting token j + 1: the answer's rows are start - 1 onwards
    # a copy: llm.scores is one buffer the next sequence overwrites
    rows.append(np.array(llm.scores[start - 1 : len(seq) - 1], dtype=np.float32))
np.save(out_path, np.stack(rows))
"""


def llama_cpp_logprobs(seqs: list[tuple[list[int], int]]) -> Any:
    """llama.cpp's log-softmax ``[n, answer length, V]`` on ``seqs`` (the GGUF the engine serves), or None when no
    interpreter has ``llama-cpp-python`` (``serving.llama_cpp_python``)."""
    import json
    import subprocess
    import tempfile

    import torch

    from serving import llama_cpp_python  # bench/ is the script's directory
    from sglang.srt.model_loader import resolve_model_path

    python = llama_cpp_python()
    if python is None:
        return None
    with tempfile.TemporaryDirectory() as d:
        Path(d, "seqs.json").write_text(json.dumps(seqs))
        subprocess.run([python, "-c", LLAMA_CPP_SCRIPT, str(resolve_model_path("smollm2-135m-instruct")), f"{d}/seqs.json",
                        f"{d}/out.npy"], check=True)
        import numpy as np

        return torch.log_softmax(torch.from_numpy(np.load(f"{d}/out.npy")), -1)


def score(got: Any, want: Any) -> tuple[int, int, float]:
    """(top-1 agreements, positions, summed KL(want || got)) of two log-softmax tensors ``[n, length, V]``."""
    return int((got.argmax(-1) == want.argmax(-1)).sum()), want.shape[0] * want.shape[1], float((want.exp() * (want - got)).sum())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", default="default,float32+none,bfloat16+gguf_q4,bfloat16+none")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--group", type=int, default=GROUP, help="sequences scored together: decode steps of this many rows "
                    "after one prefill of their prompts (the batch-size bucket measured; cpu_kernels/isa.py AGREEMENT)")
    ap.add_argument("--no-llama-cpp", action="store_true", help="skip the llama.cpp row even where llama-cpp-python is installed")
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
        reference = [answer_logprobs(ref, g) for g in groups(seqs, a.group)]
        rows.append(("float32 reference", 1.0, 0.0, *speed(ref, prompts, a.tokens)))
        del ref
    from inproc_scheduler import gguf_math

    for config in a.configs.split(","):
        with get_context().preserve_config(), gguf_math(config) as flags:
            s = build(parse(flags))
            agree = total = 0
            kl = 0.0
            for g, want in zip(groups(seqs, a.group), reference):
                a1, t1, k1 = score(answer_logprobs(s, g), want)
                agree, total, kl = agree + a1, total + t1, kl + k1  # KL >= 0 up to float rounding
            rows.append((config, agree / total, max(kl / total, 0.0), *speed(s, prompts, a.tokens)))
            del s
    if not a.no_llama_cpp:
        lc = llama_cpp_logprobs(seqs)
        if lc is None:
            print("llama-cpp-python is not installed (nor $LLAMA_CPP_PYTHON set): no llama.cpp row; see bench/serving.py")
        else:
            a1, t1, k1 = score(lc, torch.cat(reference))
            rows.append(("llama.cpp", a1 / t1, max(k1 / t1, 0.0), float("nan"), float("nan")))
    print(f"{len(PROMPTS)} prompts x {a.tokens} answer tokens, teacher-forced on the float32 reference's answers, {a.group} at a time")
    print(f"{'configuration':>20} {'top-1 agree':>11} {'KL nats/tok':>11} {'tok/s b=1':>9} {'tok/s b=16':>10}")
    for name, agree_frac, kl_tok, s1, s16 in rows:
        print(f"{name:>20} {100 * agree_frac:>10.2f}% {kl_tok:>11.5f} {s1:>9.1f} {s16:>10.1f}")


if __name__ == "__main__":
    sys.exit(main())
