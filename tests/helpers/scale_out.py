"""Shared pieces of the scale-out tests: prompts, greedy generation over HTTP, server info."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

PROMPTS = ["The capital of France is", "1, 2, 3,", "Water boils at", "The opposite of hot is"]
GREEDY = {"temperature": 0, "max_new_tokens": 12}


def post(url: str, path: str, body: dict[str, Any], timeout: float = 120) -> tuple[int, Any]:
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def get(url: str, path: str) -> tuple[int, str]:
    with urllib.request.urlopen(url + path, timeout=30) as r:
        return r.status, r.read().decode()


def server_info(url: str) -> dict[str, Any]:
    return json.loads(get(url, "/get_server_info")[1])


def greedy_texts(url: str, prompts: list[str] = PROMPTS) -> list[str]:
    out = []
    for p in prompts:
        status, body = post(url, "/generate", {"text": p, "sampling_params": GREEDY})
        assert status == 200, body
        out.append(body["text"])
    return out


def engine_texts(engine: Any, prompts: list[str] = PROMPTS) -> list[str]:
    return [r["text"] for r in engine.generate(prompts, GREEDY)]


def many_requests(url: str, n: int = 64, workers: int = 16) -> list[dict[str, Any]]:
    """``n`` distinct completions sent ``workers`` at a time; each must succeed."""
    def one(i: int) -> dict[str, Any]:
        status, body = post(url, "/generate", {"text": f"Request {i}: count from {i}:", "sampling_params": {"temperature": 0, "max_new_tokens": 8}})
        assert status == 200, body
        return body

    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(one, range(n)))
