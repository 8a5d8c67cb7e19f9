"""Short chats' inter-token latency while long prompts arrive: colocated against prefill/decode disaggregated.

Run: .venv/bin/python bench/disaggregation.py [--rounds 2] [--chats 4] [--longs 3] [--long-tokens 2000] [--chat-tokens 48]

Servers, all on the default model and started once: a colocated server on every core, and a prefill server
pinned to core 0 and a decode server pinned to core 1 (``taskset``) behind ``mini_lb``. Each round runs the
same workload against each setup in turn (A, B, A, B, ...): ``--chats`` short chats stream ``--chat-tokens``
tokens each, and while they stream, ``--longs`` prompts of ``--long-tokens`` tokens arrive one every 0.5 s
(one output token each). Printed per setup: the short chats' inter-token latency (p50, p99, max, from the
client's arrival times of the streamed chunks), their time to first token, the long prompts' time to their
one token, and (disaggregated) the prefill server's mean KV write time per request
(``sglang_kv_transfer_latency_ms``); then the ratios disaggregated / colocated.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from helpers.server import ServerProc
from sglang.utils.process import free_port


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def stream_chat(url: str, i: int, tokens: int, out: dict[str, list[Any]]) -> None:
    body = {"text": f"Chat {i}: tell me a short story about a lighthouse keeper.", "stream": True,
            "sampling_params": {"max_new_tokens": tokens, "temperature": 0, "ignore_eos": True}}
    t0 = time.perf_counter()
    req = urllib.request.Request(url + "/generate", json.dumps(body).encode(), {"Content-Type": "application/json"})
    last = None
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            if not line.startswith(b"data: {"):
                continue
            now = time.perf_counter()
            if last is None:
                out["ttft"].append(now - t0)
            else:
                out["itl"].append(now - last)
            last = now


def long_prompt(url: str, text: str, out: dict[str, list[Any]]) -> None:
    body = {"text": text, "sampling_params": {"max_new_tokens": 1, "temperature": 0}}
    t0 = time.perf_counter()
    req = urllib.request.Request(url + "/generate", json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            r.read()
    except urllib.error.HTTPError as exc:  # counted and printed: a figure without its failures would mislead
        out["errors"].append(exc.read().decode()[:300])
        return
    out["long"].append(time.perf_counter() - t0)


def workload(url: str, args: argparse.Namespace, seed: int) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {"itl": [], "ttft": [], "long": [], "errors": []}
    words = "the quick brown fox jumps over the lazy dog near a river bank while birds sing ".split()
    longs = [" ".join(words[(seed * 7 + k * 13 + j) % len(words)] for j in range(args.long_tokens)) for k in range(args.longs)]
    chats = [threading.Thread(target=stream_chat, args=(url, seed * 100 + i, args.chat_tokens, out)) for i in range(args.chats)]
    for t in chats:
        t.start()
    time.sleep(0.5)  # the chats are decoding
    lts = []
    for text in longs:
        t = threading.Thread(target=long_prompt, args=(url, text, out))
        t.start()
        lts.append(t)
        time.sleep(0.5)
    for t in chats + lts:
        t.join()
    return out


def transfer_ms(prefill_url: str) -> float:
    with urllib.request.urlopen(prefill_url + "/metrics", timeout=30) as r:
        m = re.search(r'^sglang_kv_transfer_latency_ms\{dp_rank="0"\} (\S+)$', r.read().decode(), re.M)
    return float(m.group(1)) if m else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--chats", type=int, default=4)
    ap.add_argument("--longs", type=int, default=3)
    ap.add_argument("--long-tokens", type=int, default=2000)
    ap.add_argument("--chat-tokens", type=int, default=48)
    args = ap.parse_args()
    if not shutil.which("taskset"):
        sys.exit("this benchmark pins the prefill and decode servers to one core each with taskset (util-linux)")
    logs = Path(tempfile.mkdtemp(prefix="bench-disagg-"))
    bport = free_port()
    flags = ["--log-level", "warning", "--max-total-tokens", "16384"]
    servers: dict[str, Any] = {}
    try:
        servers["colocated"] = ServerProc(flags, logs / "colocated.txt", timeout=600)
        pin = {"prefill": "0", "decode": "1"}
        for side, extra in (("prefill", ["--disaggregation-bootstrap-port", str(bport)]), ("decode", [])):
            proc = ServerProc.__new__(ServerProc)
            servers[side] = proc
            port = free_port()
            proc.port, proc.url, proc.log = port, f"http://127.0.0.1:{port}", logs / f"{side}.txt"
            proc.fh = open(proc.log, "w")
            proc.proc = subprocess.Popen(["taskset", "-c", pin[side], str(Path(sys.executable).parent / "sglang"), "serve", "--port", str(port),
                                          *flags, "--disaggregation-mode", side, *extra], stdout=proc.fh, stderr=subprocess.STDOUT,
                                         env={**os.environ, "SGLANG_QUIET_LOAD": "1"}, start_new_session=True)
        for side in ("prefill", "decode"):
            deadline = time.monotonic() + 600
            while True:
                assert servers[side].proc.poll() is None, servers[side].text()
                try:
                    with urllib.request.urlopen(servers[side].url + "/health", timeout=2):
                        break
                except OSError:
                    assert time.monotonic() < deadline
                    time.sleep(0.5)
        lb_port = free_port()
        lb = subprocess.Popen([sys.executable, "-m", "sglang.srt.disaggregation.mini_lb", "--prefill", servers["prefill"].url, str(bport),
                               "--decode", servers["decode"].url, "--port", str(lb_port), "--log-level", "warning"])
        router = f"http://127.0.0.1:{lb_port}"
        while True:
            try:
                with urllib.request.urlopen(router + "/health", timeout=2):
                    break
            except OSError:
                time.sleep(0.2)
        urls = {"colocated": servers["colocated"].url, "disaggregated": router}
        for url in urls.values():  # warm-up: first-request costs out of the figures
            workload(url, argparse.Namespace(**{**vars(args), "longs": 1, "long_tokens": 200, "chat_tokens": 4}), 99)
        results: dict[str, dict[str, list[Any]]] = {k: {"itl": [], "ttft": [], "long": [], "errors": []} for k in urls}
        for rnd in range(args.rounds):
            for name, url in urls.items():
                got = workload(url, args, rnd)
                for k, v in got.items():
                    results[name][k] += v
                print(f"round {rnd} {name}: itl p50 {1000 * pct(got['itl'], 0.5):.1f} ms, p99 {1000 * pct(got['itl'], 0.99):.1f} ms", flush=True)
        print(f"\n{args.chats} short chats x {args.chat_tokens} tokens, {args.longs} prompts of {args.long_tokens} tokens arriving every 0.5 s, "
              f"{args.rounds} rounds; CPU: {os.cpu_count()} cores")
        print(f"{'setup':15s} {'ITL p50':>9s} {'ITL p99':>9s} {'ITL max':>9s} {'chat TTFT p50':>14s} {'long prompt s':>14s}")
        summary = {}
        for name, r in results.items():
            summary[name] = (pct(r["itl"], 0.5), pct(r["itl"], 0.99), max(r["itl"]), pct(r["ttft"], 0.5), statistics.mean(r["long"]))
            s = summary[name]
            print(f"{name:15s} {1000 * s[0]:7.1f}ms {1000 * s[1]:7.1f}ms {1000 * s[2]:7.1f}ms {1000 * s[3]:12.1f}ms {s[4]:13.2f}s"
                  f"  ({len(r['errors'])} long prompts failed{': ' + r['errors'][0] if r['errors'] else ''})")
        a, b = summary["colocated"], summary["disaggregated"]
        print(f"ratio disaggregated/colocated: ITL p50 {b[0] / a[0]:.2f}, ITL p99 {b[1] / a[1]:.2f}, long prompt {b[4] / a[4]:.2f}")
        print(f"KV write time per request (prefill side, mean of its transfers incl. warm-up): {transfer_ms(servers['prefill'].url):.1f} ms")
        lb.send_signal(signal.SIGTERM)
        lb.wait(10)
    finally:
        for s in servers.values():
            s.stop()


if __name__ == "__main__":
    main()
