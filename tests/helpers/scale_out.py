"""Shared pieces of the scale-out tests: prompts, greedy generation over HTTP, server info.

The tests run the tiny random Llama of ``tiny_tp_model`` (4 heads, 2 KV heads: TP 2) with a small KV
cache, so that several ranks and replicas start within seconds on two cores."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

PROMPT_IDS = [[504, 3575, 282, 4649, 314], [33, 28, 216, 34, 28, 216, 35, 28], [9609, 15487, 418], [378, 6686, 282, 2447, 314, 1034]]
GREEDY = {"temperature": 0, "max_new_tokens": 12, "ignore_eos": True}
SMALL = ["--dtype", "float32", "--max-total-tokens", "2048"]


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


def greedy_ids(url: str) -> list[list[int]]:
    out = []
    for ids in PROMPT_IDS:
        status, body = post(url, "/generate", {"input_ids": ids, "sampling_params": GREEDY})
        assert status == 200, body
        out.append(body["output_ids"])
    return out


def many_requests(url: str, n: int = 64, workers: int = 16) -> list[dict[str, Any]]:
    """``n`` distinct completions sent ``workers`` at a time; each must succeed."""
    def one(i: int) -> dict[str, Any]:
        status, body = post(url, "/generate", {"text": f"Request {i}: count from {i}:", "sampling_params": {"max_new_tokens": 8, "ignore_eos": True}})
        assert status == 200, body
        return body

    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(one, range(n)))
