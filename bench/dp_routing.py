"""Prefix-cache hit rate of the data-parallel routing methods, side by side in one run.

Run: .venv/bin/python bench/dp_routing.py [--dp-size 2] [--groups 8] [--per-group 8] [--methods round_robin,shortest_queue,cache_aware]

The workload: ``--groups`` system prompts of about 300 tokens each, ``--per-group``
questions under each, sent in waves (one request of every group per wave, in a
shuffled order, the wave's requests together), 4 new tokens each: a chat service
whose users share a few long system prompts. The same requests go to an engine
with ``--dp-size`` replicas per method. Printed per method: the prefix-cache hit
rate (cached prompt tokens / prompt tokens, from each result's ``cached_tokens``),
how many replicas each group's requests touched on average, and the wall time.
"""

from __future__ import annotations

import argparse
import os
import random
import time


def workload(groups: int, per_group: int, seed: int = 0) -> list[list[tuple[int, str]]]:
    """Waves of (group, prompt): wave ``w`` holds question ``w`` of every group, shuffled."""
    rng = random.Random(seed)
    topics = ["astronomy", "cooking", "chess", "gardening", "music theory", "sailing", "geology", "poetry", "cycling", "finance"]
    systems = [f"You are an expert on {topics[g % len(topics)]} (assistant {g}). " + f"Answer briefly and cite the rule you used, rule {g}. " * 14
               for g in range(groups)]
    waves = []
    for w in range(per_group):
        wave = [(g, systems[g] + f"Question {w}: what is the first thing to know?") for g in range(groups)]
        rng.shuffle(wave)
        waves.append(wave)
    return waves


def run(method: str, dp_size: int, waves: list[list[tuple[int, str]]]) -> dict[str, float]:
    import sglang

    with sglang.Engine(dp_size=dp_size, load_balance_method=method, log_level="warning") as engine:
        tm = engine.tokenizer_manager
        touched: dict[int, set[int]] = {}
        cached = prompt = 0
        t0 = time.perf_counter()
        for wave in waves:
            states = []
            for g, p in wave:
                st = tm.submit(p, {"max_new_tokens": 4, "temperature": 0})
                touched.setdefault(g, set()).add(st.dp_rank)
                states.append(st)
            for st in states:
                meta = engine._wait(st)["meta_info"]
                cached += meta["cached_tokens"]
                prompt += meta["prompt_tokens"]
        elapsed = time.perf_counter() - t0
    return {"hit_rate": cached / max(prompt, 1), "replicas_per_group": sum(len(s) for s in touched.values()) / len(touched), "seconds": elapsed}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dp-size", type=int, default=2)
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--per-group", type=int, default=8)
    ap.add_argument("--methods", default="round_robin,shortest_queue,cache_aware")
    args = ap.parse_args()
    os.environ.setdefault("SGLANG_QUIET_LOAD", "1")
    waves = workload(args.groups, args.per_group)
    methods = args.methods.split(",")
    print(f"--dp-size {args.dp_size}: {args.groups} shared prompts x {args.per_group} questions, in {len(waves)} waves, "
          f"4 new tokens each; {os.cpu_count()} cores")
    print(f"{'method':<16} {'hit rate':>9} {'replicas/group':>15} {'seconds':>8}")
    rows = {m: run(m, args.dp_size, waves) for m in methods}
    for m, r in rows.items():
        print(f"{m:<16} {r['hit_rate']:>9.1%} {r['replicas_per_group']:>15.2f} {r['seconds']:>8.1f}")
    if "round_robin" in rows and "cache_aware" in rows:
        print(f"cache_aware / round_robin hit rate: {rows['cache_aware']['hit_rate'] / max(rows['round_robin']['hit_rate'], 1e-9):.2f}x")


if __name__ == "__main__":
    main()
