"""Speculative decoding: the same server with and without ``--speculative-algorithm NGRAM`` (or ``--spec-args``).

Two servers run side by side (same flags otherwise); requests alternate between them, so both see the
same machine load. Workloads at concurrency 1 (greedy, ``--max-tokens`` each, both caches flushed before
every request so no request drafts from an earlier copy of itself): copy-heavy (rewrite a passage, edit
given code), input-grounded (answer from a given document), open chat; then open chat at concurrency 16.
Prints output tokens/s of each server, their ratio, and the speculative server's accept length
(completion tokens / verify steps over the workload's requests from ``meta_info``, and
``internal_states[0].avg_spec_accept_length`` after the workload's last request).

    .venv/bin/python bench/speculative.py [--max-tokens 96] [--rounds 2] [--extra-args "--dtype float32"]

STANDALONE (a draft model) instead of NGRAM:

    .venv/bin/python bench/speculative.py --spec-args "--speculative-algorithm STANDALONE --speculative-draft-model-path smollm2-135m-instruct"

With the default model as its own draft every draft is accepted (accept length ``num_steps + 1``) but each
step also runs ``num_steps`` draft forwards as costly as the target's, so it is slower than no speculation: it
measures the machinery, not a speed-up; a speed-up needs a draft several times cheaper than the target.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from helpers.server import ServerProc

STORY = ("The lighthouse keeper climbed the spiral stairs every evening at dusk, carrying a lantern, a flask of tea and a "
         "notebook in which he wrote the colour of the sea, the direction of the wind and the names of the ships that passed "
         "the rocks below. In winter the storms came from the north, and the keeper stayed awake through the night, listening "
         "to the waves and trimming the wick so that the light would never fail.")
CODE = ("def total_price(items, tax_rate):\n    subtotal = 0\n    for item in items:\n        subtotal += item['price'] * item['qty']\n"
        "    tax = subtotal * tax_rate\n    return subtotal + tax\n\n\ndef describe(items):\n    for item in items:\n"
        "        print(item['name'], item['price'], item['qty'])\n")
DOC = ("Report: The town of Brindle Harbor has 4,200 residents. Its main industries are fishing and boat repair. The harbor "
       "was built in 1872 by the engineer Alice Morrow. The annual Lantern Festival takes place on the first Saturday of "
       "October and draws about 9,000 visitors. The town council has seven members and meets on Tuesdays.")
WORKLOADS = {
    "copy-heavy": [f"Repeat the following text exactly, word for word:\n\n{STORY}",
                   f"Rename the function total_price to order_total in this code and print the complete code:\n\n{CODE}",
                   f"Rewrite this passage, keeping every sentence but changing 'keeper' to 'guardian':\n\n{STORY}",
                   f"Add a docstring to each function in this code and print the complete code:\n\n{CODE}"],
    "input-grounded": [f"{DOC}\n\nUsing only the report, describe the town's history and its festival in detail.",
                       f"{DOC}\n\nSummarize the report in three sentences.",
                       f"{STORY}\n\nBased on the passage, what did the keeper do in winter and why?",
                       f"{DOC}\n\nWho built the harbor, when, and what are the town's industries? Quote the report."],
    "open chat": ["Write a short story about a dragon who learns to paint.", "Give me five tips for a good night's sleep.",
                  "Explain how rainbows form, for a ten-year-old.", "What are the pros and cons of working from home?"],
}


def post(url: str, path: str, body: dict | None = None) -> dict | str:
    data = json.dumps(body).encode() if body is not None else b""
    req = urllib.request.Request(url + path, data, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=900) as r:
        text = r.read().decode()
    try:
        return json.loads(text)
    except ValueError:
        return text


def generate(url: str, ids: list[int], max_tokens: int) -> tuple[float, dict]:
    """POST /generate (greedy) -> (seconds, meta_info: completion_tokens and, on the speculative server, spec_*)."""
    t0 = time.perf_counter()
    out = post(url, "/generate", {"input_ids": ids, "sampling_params": {"max_new_tokens": max_tokens, "temperature": 0}})
    assert isinstance(out, dict), out
    return time.perf_counter() - t0, out["meta_info"]


def server_accept_length(url: str) -> float | None:
    info = urllib.request.urlopen(url + "/get_server_info", timeout=30).read()
    return json.loads(info)["internal_states"][0].get("avg_spec_accept_length")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--rounds", type=int, default=2, help="passes over each workload's prompts")
    ap.add_argument("--extra-args", default="", help="more flags for both servers")
    ap.add_argument("--spec-args", default="--speculative-algorithm NGRAM", help="the speculative server's own flags")
    args = ap.parse_args()
    extra = shlex.split(args.extra_args)
    tmp = Path(tempfile.mkdtemp(prefix="bench-spec-"))
    base = ServerProc(extra, tmp / "base.log")
    spec = ServerProc([*extra, *shlex.split(args.spec_args)], tmp / "spec.log")
    servers = {"base": base.url, "spec": spec.url}
    try:
        from sglang.srt.model_loader.paths import resolve_model_path
        from sglang.srt.server_args import DEFAULT_MODEL
        from sglang.srt.tokenizer import load_tokenizer

        tok = load_tokenizer(str(resolve_model_path(DEFAULT_MODEL)))

        def chat(text: str) -> list[int]:
            return tok.encode(tok.apply_chat_template([{"role": "user", "content": text}]))

        for url in servers.values():
            generate(url, chat("Hello"), 8)  # warm-up
        print(f"spec server: {args.spec_args}; max_tokens {args.max_tokens}, greedy, both caches flushed before every request; logs in {tmp}")
        print(f"{'workload':<16} {'base tok/s':>10} {'spec tok/s':>10} {'ratio':>7} {'accept len':>11} {'last (srv)':>11}")
        for name, prompts in WORKLOADS.items():
            wall = {"base": 0.0, "spec": 0.0}
            toks = {"base": 0, "spec": 0}
            verify = 0
            spec_toks = 0
            for rnd in range(args.rounds):
                for i, p in enumerate(prompts):
                    order = ["base", "spec"] if (i + rnd) % 2 == 0 else ["spec", "base"]
                    for who in order:
                        post(servers[who], "/flush_cache")
                        w, usage = generate(servers[who], chat(p), args.max_tokens)
                        wall[who] += w
                        toks[who] += usage["completion_tokens"]
                        if who == "spec":
                            verify += usage.get("spec_verify_ct", 0)
                            spec_toks += usage["completion_tokens"]
            time.sleep(0.6)  # the scheduler reports its figures every 0.5 s
            avg = server_accept_length(spec.url)  # since the last flush: the workload's last request
            b, s = toks["base"] / wall["base"], toks["spec"] / wall["spec"]
            acc = spec_toks / verify if verify else float("nan")
            print(f"{name:<16} {b:>10.1f} {s:>10.1f} {s / b:>6.2f}x {acc:>11.2f} {avg if avg is not None else float('nan'):>11.2f}")
        # concurrency 16: 16 open-chat requests, both servers in turn (base, spec, spec, base per round; a run
        # spreads by 10% on a shared VM, so the figure is each server's median over 2 x rounds + 2 runs)
        prompts = [chat(f"{p} (variation {i})") for i in range(4) for p in WORKLOADS["open chat"]]
        res = {}
        for who in ["base", "spec", "spec", "base"] * (args.rounds + 1):
            post(servers[who], "/flush_cache")
            t0 = time.perf_counter()
            with ThreadPoolExecutor(16) as pool:
                n = sum(u["completion_tokens"] for _, u in pool.map(lambda p, u=servers[who]: generate(u, p, args.max_tokens), prompts))
            res.setdefault(who, []).append(n / (time.perf_counter() - t0))
        b, s = statistics.median(res["base"]), statistics.median(res["spec"])
        time.sleep(0.6)
        avg = server_accept_length(spec.url)
        print(f"{'chat, conc. 16':<16} {b:>10.1f} {s:>10.1f} {s / b:>6.2f}x {'':>11} {avg if avg is not None else float('nan'):>11.2f}")
    finally:
        base.stop()
        spec.stop()



if __name__ == "__main__":
    main()
