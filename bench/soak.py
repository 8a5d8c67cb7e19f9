"""Soak: mixed traffic for minutes against one server; it must not die, leak pages or grow.

Run: .venv/bin/python bench/soak.py [--duration 600] [--concurrency 32] [--args "--dtype float32"]

Each of `--concurrency` clients loops until the deadline: streaming and
non-streaming chat and completions (greedy and sampled, 8-48 new tokens);
one request in five disconnects at a random moment; one in ten is hostile
(a body from the hostile-input suite, which must get a 4xx). At the end it
prints completed, failed (legal requests that got an error), hostile answered
with 4xx, server deaths (must be 0), the scheduler's RSS at start and end
(growth under 5%), and KV pages still in use after a cache flush (leaked:
must be 0).
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import re
import shlex
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from helpers.server import ServerProc

HOSTILE = [
    ("/generate", {"text": "hi", "sampling_params": {"skip_special_tokens": "junk"}}),
    ("/generate", {"text": "hi", "sampling_params": {"seed": 18446744073709551616}}),
    ("/generate", {"text": "hi", "sampling_params": {"repetition_penalty": 1e-300}}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}),
    ("/v1/completions", {"prompt": "h\ud800i", "max_tokens": 2}),
    ("/v1/completions", {"prompt": "hi", "best_of": 10**9}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "tools": "junk"}),
    ("/generate", {"input_ids": [10**7]}),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 10**9}),
]
PROMPTS = ["Write a haiku about the sea.", "List three fruits.", "Explain rain in one sentence.", "Count from one to ten.",
           "What is the capital of Italy?", "Describe a cat.", "Give me a fun fact.", "Say hello in French."]


def scheduler_rss_mb(pid: int) -> float:
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+)", text).group(1)) / 1024


def metric(port: int, name: str) -> float:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " "))


def _has_error(text: str, stream: bool) -> bool:
    """An error body, or an error event in a stream (a generated word "error" is not one)."""
    if not stream:
        return "error" in json.loads(text)
    events = [line[6:] for line in text.splitlines() if line.startswith("data: ") and line != "data: [DONE]"]
    return any("error" in json.loads(e) for e in events)


def one(port: int, rng: random.Random, tally: Counter, lock: threading.Lock) -> None:
    roll = rng.random()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    headers = {"Content-Type": "application/json"}
    try:
        if roll < 0.1:
            route, body = rng.choice(HOSTILE)
            conn.request("POST", route, json.dumps(body), headers)
            r = conn.getresponse()
            r.read()
            with lock:
                tally["hostile_4xx" if 400 <= r.status < 500 else f"hostile_{r.status}"] += 1
            return
        stream = rng.random() < 0.5
        chat = rng.random() < 0.5
        sampling = {"max_tokens": rng.randint(8, 48), "temperature": rng.choice([0, 0.7, 1.0]), "stream": stream}
        if chat:
            route, body = "/v1/chat/completions", {"messages": [{"role": "user", "content": rng.choice(PROMPTS)}], **sampling}
        else:
            route, body = "/v1/completions", {"prompt": rng.choice(PROMPTS), **sampling}
        conn.request("POST", route, json.dumps(body), headers)
        if roll < 0.3:  # one in five of all requests: disconnect at a random moment
            time.sleep(rng.uniform(0.0, 1.5))
            conn.sock.close()
            with lock:
                tally["disconnected"] += 1
            return
        r = conn.getresponse()
        text = r.read().decode(errors="replace")
        ok = r.status == 200 and not _has_error(text, stream) and (not stream or text.rstrip().endswith("data: [DONE]"))
        with lock:
            tally["completed" if ok else "failed"] += 1
            if not ok and tally["failed"] <= 3:
                print(f"failed: {r.status} ... {text[-400:]}", flush=True)
    except OSError as exc:
        with lock:
            tally["failed"] += 1
            if tally["failed"] <= 3:
                print(f"failed: {type(exc).__name__}: {exc}", flush=True)
    finally:
        conn.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=600)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--args", default="", help="extra `sglang serve` flags")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    log = Path(tempfile.mkdtemp(prefix="sglang-soak-")) / "server.log"
    server = ServerProc(shlex.split(a.args), log)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        conn.request("GET", "/get_server_info")
        info = json.loads(conn.getresponse().read())
        pid = int(re.search(r"pid (\d+)", info["runtime"]["process"]).group(1))
        warm: Counter = Counter()
        for burst in range(3):  # warm up at full concurrency (batch shapes, allocator pools) before the first RSS reading
            ts = [threading.Thread(target=one, args=(server.port, random.Random(-1000 * burst - k), warm, threading.Lock()))
                  for k in range(a.concurrency)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
        rss_start = scheduler_rss_mb(pid)
        tally: Counter = Counter()
        lock = threading.Lock()
        deadline = time.monotonic() + a.duration

        def client(k: int) -> None:
            rng = random.Random(a.seed * 1000 + k)
            while time.monotonic() < deadline and server.proc.poll() is None:
                one(server.port, rng, tally, lock)

        threads = [threading.Thread(target=client, args=(k,)) for k in range(a.concurrency)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - t0
        deaths = 0 if server.proc.poll() is None else 1
        leaked = running = -1.0
        rss_end = float("nan")
        if not deaths:
            idle = time.monotonic() + 30
            while time.monotonic() < idle and (metric(server.port, "sglang_num_running_reqs") or metric(server.port, "sglang_num_queue_reqs")):
                time.sleep(0.5)
            running = metric(server.port, "sglang_num_running_reqs")
            c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
            c.request("POST", "/flush_cache", b"{}", {"Content-Type": "application/json"})
            c.getresponse().read()
            time.sleep(1.5)  # the scheduler reports its pages every 0.5 s
            leaked = metric(server.port, "sglang_used_pages")
            rss_end = scheduler_rss_mb(pid)
        growth = (rss_end / rss_start - 1) * 100
        print(f"soak: {elapsed:.0f} s at concurrency {a.concurrency} ({a.args or 'defaults'})")
        print(f"  completed {tally['completed']}  failed {tally['failed']}  disconnected {tally['disconnected']}  "
              f"hostile answered 4xx {tally['hostile_4xx']} (other: {sum(v for k, v in tally.items() if k.startswith('hostile_') and k != 'hostile_4xx')})")
        print(f"  server deaths {deaths}  running after {running:.0f}  KV pages leaked {leaked:.0f}")
        print(f"  scheduler RSS {rss_start:.0f} MB -> {rss_end:.0f} MB ({growth:+.1f}%)")
        verdict = deaths == 0 and leaked == 0 and tally["failed"] == 0 and growth < 5
        print(f"  {'PASS' if verdict else 'FAIL'}: no deaths, no leaked pages, no failed legal request, RSS growth under 5%")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
