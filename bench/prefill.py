"""Prefill: time to first token of one long prompt at a time, this server beside the ``llama-cpp-python`` server.

Run: LLAMA_CPP_PYTHON=V/bin/python .venv/bin/python bench/prefill.py [--lengths 265,1000,2000,4000] [--reps 3]
    [--dtypes default]

Each prompt is new (a distinct head and random words), so no prefix cache serves any of it; ``max_tokens`` 1, so the
time is the prompt's prefill (and one sampled token). Prints the best of ``--reps`` per length as prompt tokens/s and
this server's ratio to llama.cpp's. Getting the anchor: bench/serving.py's docstring.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from helpers.server import ServerProc
from offline import parse_config
from serving import llama_cpp_server

WORDS = ("the lighthouse keeper walked along the rocky shore at dawn watching ships pass by while gulls cried overhead "
         "and the tide rose slowly over the old stone pier").split()


def prompt(words: int, seed: int) -> str:
    r = random.Random(seed)
    return f"Document {seed}: " + " ".join(r.choice(WORDS) for _ in range(words))


def first_token(url: str, model: str, words: int, seed: int) -> tuple[float, int]:
    """Seconds to the whole answer of one token, and the prompt's token count (the server's own usage)."""
    body = {"model": model, "prompt": prompt(words, seed), "max_tokens": 1, "temperature": 0}
    req = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=900) as r:
        usage = json.loads(r.read())["usage"]
    return time.perf_counter() - t0, int(usage["prompt_tokens"])


def measure(url: str, model: str, lengths: list[int], reps: int, seeds: Iterator[int]) -> dict[int, tuple[float, int]]:
    first_token(url, model, 32, next(seeds))  # warm-up
    out = {}
    for n in lengths:
        runs = [first_token(url, model, n, next(seeds)) for _ in range(reps)]
        out[n] = (min(t for t, _ in runs), runs[0][1])
    return out


def main() -> None:
    import itertools

    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", default="265,1000,2000,4000", help="prompt lengths in words (about one token each)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dtypes", default="default")
    args = ap.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    seeds = itertools.count(int(time.time()))  # never a prompt either server has seen
    systems: dict[str, dict[int, tuple[float, int]]] = {}
    for dt in args.dtypes.split(","):
        flags = [x for k, v in parse_config(dt).items() if v for x in (f"--{k.replace('_', '-')}", v)]
        s = ServerProc([*flags, "--served-model-name", "smol", "--log-level", "warning"], Path(tempfile.mktemp(suffix=".log")))
        try:
            systems[f"sglang serve ({dt})"] = measure(s.url, "smol", lengths, args.reps, seeds)
        finally:
            s.stop()
    with llama_cpp_server() as url:
        if url is not None:
            systems["llama-cpp-python server"] = measure(url, "smollm2", lengths, args.reps, seeds)
    print(f"one prompt at a time, max_tokens 1, best of {args.reps}")
    print(f"{'system':<32} {'words':>6} {'tokens':>7} {'TTFT s':>8} {'prompt tok/s':>13}")
    for name, res in systems.items():
        for n, (t, toks) in res.items():
            print(f"{name:<32} {n:>6} {toks:>7} {t:>8.3f} {toks / t:>13.1f}")
    ref = systems.get("llama-cpp-python server")
    if ref is None:
        print("llama-cpp-python is not installed: its server was not measured")
        return
    for name, res in systems.items():
        if name.startswith("sglang"):
            print(f"{name} / llama-cpp-python prompt tokens/s: " + ", ".join(
                f"{n} words: {(res[n][1] / res[n][0]) / (ref[n][1] / ref[n][0]):.2f}x" for n in lengths))


if __name__ == "__main__":
    main()
