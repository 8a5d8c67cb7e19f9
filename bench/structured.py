"""Structured outputs: JSON-schema decoding against free decoding, grammar compile time, bitmask cost.

Run: .venv/bin/python bench/structured.py [--max-tokens 128] [--args "--dtype bfloat16"]

One server (the default configuration unless --args says otherwise) serves both kinds of request in one
run: free completions (EOS ignored) and completions under a JSON schema long enough that both run to
``--max-tokens``. Output tokens/s at concurrency 1 and 16, and the ratio (target: constrained at least
0.8x free at concurrency 16). Then, offline on the same tokenizer: the xgrammar compile time of three
schemas, and the per-step cost of filling and applying the token bitmask for a batch of 16.
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
from helpers.server import ServerProc

EOS_ID = 2  # SmolLM2's <|im_end|>
ITEM = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer"},
                                         "city": {"type": "string", "maxLength": 20}, "role": {"enum": ["student", "teacher", "engineer"]}},
        "required": ["name", "age", "city", "role"], "additionalProperties": False}
LONG = {"type": "array", "items": ITEM, "minItems": 40}  # never complete within --max-tokens: both kinds decode the same count
LEVELS = {1: 3, 16: 32}  # concurrency -> requests


def request(url: str, i: int, max_tokens: int, constrained: bool) -> int:
    body: dict = {"model": "default", "prompt": f"A list of people as JSON, variation {i}:", "max_tokens": max_tokens, "temperature": 0}
    if constrained:
        body["json_schema"] = json.dumps(LONG)
    else:
        body.update(ignore_eos=True, logit_bias={str(EOS_ID): -100})
    req = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())["usage"]["completion_tokens"]


def throughput(url: str, concurrency: int, n: int, max_tokens: int, constrained: bool) -> float:
    request(url, 10_000, 8, constrained)  # warm: the schema compiles once, outside the timing
    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        tokens = sum(pool.map(lambda i: request(url, i, max_tokens, constrained), range(n)))
    return tokens / (time.perf_counter() - t0)


def offline() -> None:
    import torch

    from sglang.srt.constrained import create_grammar_backend
    from sglang.srt.model_loader.paths import resolve_model_path
    from sglang.srt.server_args import DEFAULT_MODEL
    from sglang.srt.tokenizer import load_tokenizer

    tok = load_tokenizer(str(resolve_model_path(DEFAULT_MODEL)))
    t0 = time.perf_counter()
    backend = create_grammar_backend("xgrammar", tok, tok.vocab_size)
    print(f"xgrammar backend start (import + token table): {time.perf_counter() - t0:.2f} s")
    tools = {"type": "array", "maxItems": 1, "items": {"anyOf": [{"type": "object", "properties": {"name": {"enum": [f"f{k}"]}, "parameters": ITEM},
                                                                    "required": ["name", "parameters"]} for k in range(8)]}}
    for name, schema in (("one object", ITEM), ("array of objects", LONG), ("8 tools, required", tools)):
        t0 = time.perf_counter()
        compiled = backend.compile(("json", json.dumps(schema)))
        print(f"compile {name:18s} {1e3 * (time.perf_counter() - t0):7.2f} ms")
    matchers = [backend.new_matcher(compiled) for _ in range(16)]
    for m in matchers:
        m.accept_token(tok.encode("[", add_special_tokens=False)[0])
    logits = torch.randn(16, tok.vocab_size)
    mask = backend.allocate_vocab_mask(16)
    reps = 200
    t0 = time.perf_counter()
    for _ in range(reps):
        for i, m in enumerate(matchers):
            m.fill_vocab_mask(mask, i)
    fill = (time.perf_counter() - t0) / reps
    t0 = time.perf_counter()
    for _ in range(reps):
        backend.apply_vocab_mask(logits, mask, list(range(16)))
    apply = (time.perf_counter() - t0) / reps
    print(f"bitmask, batch 16: fill {1e3 * fill:.3f} ms + apply {1e3 * apply:.3f} ms per step")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--args", default="", help="extra sglang serve flags")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = ServerProc(shlex.split(a.args), Path(tmp) / "log.txt")
        try:
            print(f"sglang serve {a.args or '(default flags)'}, {a.max_tokens} tokens per request")
            print(f"{'concurrency':>11} {'free tok/s':>11} {'json tok/s':>11} {'ratio':>6}")
            for c, n in LEVELS.items():
                free = throughput(server.url, c, n, a.max_tokens, False)
                constrained = throughput(server.url, c, n, a.max_tokens, True)
                print(f"{c:>11} {free:>11.1f} {constrained:>11.1f} {constrained / free:>6.2f}")
        finally:
            server.stop()
    offline()


if __name__ == "__main__":
    main()
