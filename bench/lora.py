"""Multi-LoRA serving: output tokens/s with adapters against the base model, on one server.

Run: .venv/bin/python bench/lora.py [--max-tokens 64] [--rounds 2] [--rank 8] [--args "--dtype bfloat16"]

Four rank-``--rank`` adapters on every linear module (random weights in PEFT's file format, written to a
temporary directory) are loaded at start with ``--max-loras-per-batch 5``. In each round, interleaved on
the same server: concurrency 16 with the four adapters mixed (request i uses adapter i % 4) against the
base model, and concurrency 1 with one adapter against the base model. EOS is ignored, so every request
decodes ``--max-tokens``. Prints tokens/s of each and the ratios (issue targets: mixed >= 0.6x base at
concurrency 16, one adapter >= 0.8x base at concurrency 1).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from helpers import lora_adapters
from helpers.server import ServerProc

# SmolLM2-135M: hidden 576, 9 query heads and 3 KV heads of 64, MLP 1536, 30 layers
DIMS = {"q_proj": (576, 576), "k_proj": (576, 192), "v_proj": (576, 192), "o_proj": (576, 576),
        "gate_proj": (576, 1536), "up_proj": (576, 1536), "down_proj": (1536, 576)}
LAYERS = 30
ADAPTERS = 4
LEVELS = {16: 32, 1: 4}  # concurrency -> requests


def write_adapter(path: Path, rank: int, seed: int) -> None:
    lora_adapters.write_adapter(path, DIMS, LAYERS, rank, list(DIMS), seed, scale=0.02)


def request(url: str, i: int, max_tokens: int, lora: str | None) -> int:
    body = {"text": f"Tell me a long story, variation {i}:", "lora_path": lora,
            "sampling_params": {"max_new_tokens": max_tokens, "temperature": 0, "ignore_eos": True}}
    req = urllib.request.Request(url + "/generate", json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=900) as r:
        return json.loads(r.read())["meta_info"]["completion_tokens"]


def throughput(url: str, concurrency: int, max_tokens: int, loras: list[str | None]) -> float:
    n = LEVELS[concurrency]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        tokens = sum(pool.map(lambda i: request(url, i, max_tokens, loras[i % len(loras)]), range(n)))
    return tokens / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--args", default="", help="extra server flags")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        names = [f"ad{k}" for k in range(ADAPTERS)]
        for k, name in enumerate(names):
            write_adapter(Path(tmp) / name, a.rank, k)
        args = ["--max-loras-per-batch", str(ADAPTERS + 1), "--lora-paths", *(f"{n}={Path(tmp) / n}" for n in names), *shlex.split(a.args)]
        server = ServerProc(args, Path(tmp) / "server.log", timeout=600)
        try:
            for lora in (None, names[0]):  # warm both paths (the kernels, the first adapter placement)
                request(server.url, 0, 8, lora)
            res: dict[str, list[float]] = {k: [] for k in ("base16", "mixed16", "base1", "one1")}
            for r in range(a.rounds):
                res["base16"].append(throughput(server.url, 16, a.max_tokens, [None]))
                res["mixed16"].append(throughput(server.url, 16, a.max_tokens, list(names)))
                res["base1"].append(throughput(server.url, 1, a.max_tokens, [None]))
                res["one1"].append(throughput(server.url, 1, a.max_tokens, [names[0]]))
                print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in res.items()), flush=True)
        finally:
            server.stop()
    med = {k: sorted(v)[len(v) // 2] for k, v in res.items()}
    print(f"concurrency 16: base {med['base16']:.1f} tok/s, four adapters mixed {med['mixed16']:.1f} tok/s, "
          f"ratio {med['mixed16'] / med['base16']:.2f} (target >= 0.6)")
    print(f"concurrency 1: base {med['base1']:.1f} tok/s, one adapter {med['one1']:.1f} tok/s, "
          f"ratio {med['one1'] / med['base1']:.2f} (target >= 0.8)")


if __name__ == "__main__":
    main()
