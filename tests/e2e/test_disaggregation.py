"""Prefill/decode disaggregation with real processes on 127.0.0.1 and Mooncake's transfer engine (TCP).

One prefill server, two decode servers (one with a KV cache of 160 tokens) and two routers
(``python -m sglang.srt.disaggregation.mini_lb``). The reference is the prefill server itself: a request
without a ``bootstrap_room`` runs there from prompt to end, as on a colocated server with the same
weights and flags. The model is the tiny random Llama of ``tiny_tp_model`` (with the default model's chat
template), so that three servers start within seconds on two cores; a KV page that did not arrive, or
arrived in the wrong place, changes its greedy output."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from helpers.scale_out import get, post
from helpers.server import ServerProc
from sglang.utils.process import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.model]

ENV = {"SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL": "0.5", "SGLANG_DISAGGREGATION_WAITING_TIMEOUT": "60",
       "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT": "60"}
COMMON = ["--dtype", "float32", "--log-level", "warning"]
RADIX_WAITING_TIMEOUT = 6  # the radix decode server's SGLANG_DISAGGREGATION_WAITING_TIMEOUT
TINY_DECODE_TOKENS = 160
PROMPTS = ["The capital of France is", "1, 2, 3, 4,", "def fibonacci(n):", "Once upon a time in a small village"]
GREEDY = {"temperature": 0, "max_new_tokens": 10, "ignore_eos": True}


class Router:
    def __init__(self, prefill: str, bootstrap_port: int, decode: str, log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.fh = open(log, "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "sglang.srt.disaggregation.mini_lb", "--prefill", prefill, str(bootstrap_port),
                                      "--decode", decode, "--port", str(self.port)], stdout=self.fh, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while True:
            assert self.proc.poll() is None, log.read_text()
            try:
                if get(self.url, "/health")[0] == 200:
                    return
            except OSError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        self.fh.close()


@pytest.fixture(scope="module")
def pd_model(tmp_path_factory, tiny_tp_model, engine):
    path = tmp_path_factory.mktemp("pd-model")
    shutil.copytree(tiny_tp_model, path, dirs_exist_ok=True)
    cfg = json.loads((path / "tokenizer_config.json").read_text())
    cfg["chat_template"] = engine.tokenizer_manager.tokenizer.chat_template
    (path / "tokenizer_config.json").write_text(json.dumps(cfg))
    return path


@pytest.fixture(scope="module")
def pd(tmp_path_factory, pd_model):
    logs = tmp_path_factory.mktemp("pd")
    bport = free_port()
    model = ["--model-path", str(pd_model), *COMMON]
    specs = {
        "prefill": [*model, "--max-total-tokens", "2048", "--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", str(bport)],
        "decode": [*model, "--max-total-tokens", "2048", "--disaggregation-mode", "decode"],
        "tiny": [*model, "--max-total-tokens", str(TINY_DECODE_TOKENS), "--disaggregation-mode", "decode", "--num-reserved-decode-tokens", "8"],
        "fake": [*model, "--max-total-tokens", "2048", "--disaggregation-mode", "decode", "--disaggregation-transfer-backend", "fake"],
    }
    specs["radix"] = [*model, "--max-total-tokens", "2048", "--disaggregation-mode", "decode", "--disaggregation-decode-enable-radix-cache"]
    env = {k: ENV for k in specs} | {"radix": {**ENV, "SGLANG_DISAGGREGATION_WAITING_TIMEOUT": str(RADIX_WAITING_TIMEOUT)}}
    with ThreadPoolExecutor(len(specs)) as pool:
        futs = {k: pool.submit(ServerProc, args, logs / f"{k}.txt", env[k]) for k, args in specs.items()}
        servers = {k: f.result() for k, f in futs.items()}
    servers["router"] = Router(servers["prefill"].url, bport, servers["decode"].url, logs / "router.txt")
    servers["tiny_router"] = Router(servers["prefill"].url, bport, servers["tiny"].url, logs / "tiny_router.txt")
    servers["radix_router"] = Router(servers["prefill"].url, bport, servers["radix"].url, logs / "radix_router.txt")
    servers["bootstrap_port"] = bport
    yield servers
    for k in ("router", "tiny_router", "radix_router", "prefill", "decode", "tiny", "fake", "radix"):
        servers[k].stop()


def gauges(url: str) -> dict[str, float]:
    text = get(url, "/metrics")[1]
    return {m[1]: float(m[2]) for m in re.finditer(r'^sglang_(\w+)\{dp_rank="0"\} (\S+)$', text, re.M)}


def settled(url: str, want: dict[str, float | Callable[[float | None], bool]], timeout: float = 20) -> dict[str, float]:
    """The server's gauges once each equals its ``want`` (or passes it, a predicate), or the last seen: the scheduler
    reports every 0.5 s, so a gauge read right after a request may still be the one from before it."""
    deadline = time.monotonic() + timeout
    while True:
        g = gauges(url)
        if all(v(g.get(k)) if callable(v) else g.get(k) == v for k, v in want.items()) or time.monotonic() > deadline:
            return g
        time.sleep(0.25)


def no_leaks(pd: dict[str, Any]) -> None:
    """Every decode page free; every prefill page free or held by its prefix cache; every queue empty."""
    for name in ("decode", "tiny"):
        g = settled(pd[name].url, {"used_pages": 0, "num_decode_prealloc_queue_reqs": 0, "num_decode_transfer_queue_reqs": 0})
        assert g["used_pages"] == 0 and g["num_decode_prealloc_queue_reqs"] == 0 and g["num_decode_transfer_queue_reqs"] == 0, (name, g)
    with urllib.request.urlopen(urllib.request.Request(pd["prefill"].url + "/flush_cache", b"", method="POST"), timeout=30) as r:
        assert r.status == 200
    g = settled(pd["prefill"].url, {"used_pages": 0, "num_prefill_bootstrap_queue_reqs": 0, "num_prefill_inflight_queue_reqs": 0})
    assert g["used_pages"] == 0 and g["num_prefill_bootstrap_queue_reqs"] == 0 and g["num_prefill_inflight_queue_reqs"] == 0, g


def generate(url: str, text: str, **extra: Any) -> dict[str, Any]:
    status, body = post(url, "/generate", {"text": text, "sampling_params": GREEDY, **extra})
    assert status == 200, body
    return body


def test_generate_with_logprobs_matches_colocated(pd):
    lp = {"return_logprob": True, "logprob_start_len": 0, "top_logprobs_num": 3}
    for text in PROMPTS:
        want, got = generate(pd["prefill"].url, text, **lp), generate(pd["router"].url, text, **lp)
        assert got["output_ids"] == want["output_ids"] and got["text"] == want["text"]
        w, g = want["meta_info"], got["meta_info"]
        assert g["completion_tokens"] == len(want["output_ids"]) and g["prompt_tokens"] == w["prompt_tokens"]
        for key in ("input_token_logprobs", "output_token_logprobs"):
            assert [t for _, t, _ in g[key]] == [t for _, t, _ in w[key]], key
            assert all((a is None and b is None) or abs(a - b) < 1e-4 for (a, _, _), (b, _, _) in zip(g[key], w[key])), key
        assert [[t for _, t, _ in top] for top in g["output_top_logprobs"]] == [[t for _, t, _ in top] for top in w["output_top_logprobs"]]


def test_openai_chat_completions_and_streaming_match_colocated(pd):
    import openai

    direct = openai.OpenAI(base_url=pd["prefill"].url + "/v1", api_key="none", max_retries=0, timeout=60)
    routed = openai.OpenAI(base_url=pd["router"].url + "/v1", api_key="none", max_retries=0, timeout=60)
    for text in PROMPTS[:2]:
        chat = {"model": "default", "messages": [{"role": "user", "content": text}], "max_tokens": 8, "temperature": 0}
        want = direct.chat.completions.create(**chat)
        got = routed.chat.completions.create(**chat)
        assert got.choices[0].message.content == want.choices[0].message.content and got.usage == want.usage
        streamed = "".join(c.choices[0].delta.content or "" for c in routed.chat.completions.create(**chat, stream=True) if c.choices)
        assert streamed == want.choices[0].message.content
        comp = {"model": "default", "prompt": text, "max_tokens": 8, "temperature": 0}
        assert routed.completions.create(**comp).choices[0].text == direct.completions.create(**comp).choices[0].text
        assert "".join(c.choices[0].text for c in routed.completions.create(**comp, stream=True)) == direct.completions.create(**comp).choices[0].text
    assert routed.models.list().data[0].id  # /v1/models goes through too
    assert get(pd["router"].url, "/health_generate")[0] == 200


def test_structured_output_and_first_token_finish_match_colocated(pd):
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}, "age": {"type": "integer"}},
              "required": ["name", "age"], "additionalProperties": False}
    body = {"model": "default", "messages": [{"role": "user", "content": "A person as JSON"}], "max_tokens": 40, "temperature": 0,
            "response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": schema}}}
    s1, want = post(pd["prefill"].url, "/v1/chat/completions", body)
    s2, got = post(pd["router"].url, "/v1/chat/completions", body)
    assert s1 == s2 == 200, (want, got)
    assert got["choices"][0]["message"]["content"] == want["choices"][0]["message"]["content"]
    one = generate(pd["router"].url, PROMPTS[0], sampling_params={"temperature": 0, "max_new_tokens": 1})
    assert one["meta_info"]["completion_tokens"] == 1 and one["output_ids"] == generate(pd["prefill"].url, PROMPTS[0])["output_ids"][:1]


def test_bootstrap_fields_are_checked_against_the_mode(pd):
    status, body = post(pd["decode"].url, "/generate", {"text": "hi", "sampling_params": GREEDY})
    assert status == 400 and "bootstrap_host" in body and "mini_lb" in body
    status, body = post(pd["decode"].url, "/generate", {"text": "hi", "bootstrap_host": "127.0.0.1", "bootstrap_port": 1, "bootstrap_room": -1})
    assert status == 400 and "bootstrap_room" in body


def test_fake_backend_decodes_with_no_prefill_server_and_leaks_nothing(pd):
    """``--disaggregation-transfer-backend fake``: requests straight to the decode server, none to a prefill
    server; the first token is the prompt's last one, then the server decodes on KV nobody wrote."""
    url = pd["fake"].url
    texts = [f"Request {i}: " + "count the sheep " * (3 + i) for i in range(4)]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda t: generate(url, t, return_logprob=True, top_logprobs_num=2), texts))
    for text, body in zip(texts, got):
        prompt = generate(pd["prefill"].url, text, sampling_params={"max_new_tokens": 0}, return_logprob=True,
                          logprob_start_len=0)["meta_info"]["input_token_logprobs"]
        assert body["output_ids"][0] == prompt[-1][1] and body["meta_info"]["completion_tokens"] == GREEDY["max_new_tokens"]
        assert len(body["meta_info"]["output_token_logprobs"]) == GREEDY["max_new_tokens"]
    status, chat = post(url, "/v1/chat/completions", {"model": "default", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
    assert status == 200 and 1 <= chat["usage"]["completion_tokens"] <= 4, chat
    req = urllib.request.Request(url + "/generate", json.dumps({"text": "hi", "sampling_params": GREEDY, "stream": True}).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        events = [json.loads(line[len(b"data: "):]) for line in r.read().split(b"\n\n") if line.startswith(b"data: {")]
    assert events[-1]["meta_info"]["completion_tokens"] == GREEDY["max_new_tokens"]
    # upstream's sentinel host runs without a transfer on a real decode server too (its warm-up requests)
    body = generate(pd["decode"].url, PROMPTS[0], bootstrap_host="2.2.2.2", bootstrap_port=8998, bootstrap_room=7)
    assert body["meta_info"]["completion_tokens"] == GREEDY["max_new_tokens"]
    for u in (url, pd["decode"].url):
        g = settled(u, {"used_pages": 0, "num_decode_prealloc_queue_reqs": 0, "num_decode_transfer_queue_reqs": 0})
        assert g["used_pages"] == 0 and g["num_decode_prealloc_queue_reqs"] == 0 and g["num_decode_transfer_queue_reqs"] == 0, g


def test_decode_radix_cache_sends_only_uncached_pages_and_answers_as_without_it(pd):
    """``--disaggregation-decode-enable-radix-cache``: the second prompt sharing a prefix finds it cached on the
    decode server (``cached_tokens``), the prefill server writes only the rest, and the answers stay those of
    the decode server without the cache and of a colocated server."""
    shared = "You are a careful assistant. Answer briefly and truthfully. " * 3
    texts = [shared + q for q in ("What is two plus two?", "Name a colour.", "What is two plus two?")]
    got = [generate(pd["radix_router"].url, t) for t in texts]  # in order: each finds what the ones before it left
    assert [g["output_ids"] for g in got] == [generate(pd["router"].url, t)["output_ids"] for t in texts]
    assert [g["output_ids"] for g in got] == [generate(pd["prefill"].url, t)["output_ids"] for t in texts]
    cached, prompt = [g["meta_info"]["cached_tokens"] for g in got], [g["meta_info"]["prompt_tokens"] for g in got]
    assert cached[0] == 0 and prompt[0] // 2 < cached[1] < prompt[1] and cached[2] == prompt[2], (cached, prompt)
    assert all(g["meta_info"]["cached_tokens"] == 0 for g in (generate(pd["router"].url, texts[2]),))  # the plain decode server
    held = settled(pd["radix"].url, {"num_decode_prealloc_queue_reqs": 0, "used_pages": lambda n: bool(n)})
    assert held["used_pages"] > 0  # the cache holds the pages
    status, body = post(pd["radix"].url, "/generate", {"text": texts[0], "bootstrap_host": "2.2.2.2", "bootstrap_port": 8998, "bootstrap_room": 1})
    assert status == 500 and "would enter the prefix cache" in body, body  # no unwritten KV in its cache
    with urllib.request.urlopen(urllib.request.Request(pd["radix"].url + "/flush_cache", b"", method="POST"), timeout=30) as r:
        assert r.status == 200
    g = settled(pd["radix"].url, {"used_pages": 0, "num_decode_prealloc_queue_reqs": 0, "num_decode_transfer_queue_reqs": 0})
    assert g["used_pages"] == 0 and g["num_decode_transfer_queue_reqs"] == 0, g


def test_a_transfer_that_times_out_fails_naming_the_decode_side_and_leaks_nothing(pd):
    """A decode server whose prefill server never gets the request (sent to the decode server alone) fails it
    after SGLANG_DISAGGREGATION_WAITING_TIMEOUT, naming the side and the cause; its pages come back."""
    t0 = time.monotonic()
    status, body = post(pd["radix"].url, "/generate", {"text": PROMPTS[1], "sampling_params": GREEDY, "bootstrap_host": "127.0.0.1",
                                                       "bootstrap_port": pd["bootstrap_port"], "bootstrap_room": 4242})
    took = time.monotonic() - t0
    assert status == 500 and "decode: no KV arrived" in body and "SGLANG_DISAGGREGATION_WAITING_TIMEOUT" in body, body
    assert f"127.0.0.1:{pd['bootstrap_port']}" in body and RADIX_WAITING_TIMEOUT <= took < RADIX_WAITING_TIMEOUT + 20, (took, body)
    g = settled(pd["radix"].url, {"used_pages": 0, "num_decode_prealloc_queue_reqs": 0, "num_decode_transfer_queue_reqs": 0})
    assert g["used_pages"] == 0 and g["num_decode_transfer_queue_reqs"] == 0 and g["num_transfer_failed_reqs_total"] >= 1, g
    g = settled(pd["prefill"].url, {"num_prefill_bootstrap_queue_reqs": 0})  # the decode side's abort cleared its page list there
    assert g["num_prefill_bootstrap_queue_reqs"] == 0, g


def test_tiny_decode_pool_queues_what_fits_and_refuses_what_cannot_naming_the_decode_side(pd):
    texts = [f"Request {i}: " + "count the sheep one by one " * 6 for i in range(6)]  # ~45 tokens + 10: about two fit at a time
    with ThreadPoolExecutor(6) as pool:
        got = list(pool.map(lambda t: generate(pd["tiny_router"].url, t)["output_ids"], texts))
    assert got == [generate(pd["prefill"].url, t)["output_ids"] for t in texts]
    t0 = time.monotonic()
    status, body = post(pd["tiny_router"].url, "/generate", {"text": "many words " * 100, "sampling_params": GREEDY})
    assert status == 400 and f"decode server {pd['tiny'].url}" in body and f"{TINY_DECODE_TOKENS} tokens" in body, body
    assert time.monotonic() - t0 < 30
    no_leaks(pd)  # the refused request's prefill side was cancelled by the router


def test_killed_prefill_fails_its_requests_naming_it_and_leaks_nothing(pd):
    """Last in the module: it kills the prefill server. Two requests whose KV already moved decode to the end;
    six sent while the prefill server is frozen (SIGSTOP), then killed, fail naming it; nothing leaks."""
    results: dict[int, tuple[int, str]] = {}
    streaming = threading.Barrier(3)

    def one(i: int, stream: bool) -> None:
        body = {"text": f"Story {i}: " + "once upon a time " * 20, "stream": stream,
                "sampling_params": {"temperature": 0, "max_new_tokens": 300, "ignore_eos": True}}
        req = urllib.request.Request(pd["router"].url + "/generate", json.dumps(body).encode(), {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                if stream:
                    first = r.readline()
                    streaming.wait(30)  # its first token is out: its KV is on the decode server
                    results[i] = (r.status, (first + r.read()).decode())
                else:
                    results[i] = (r.status, r.read().decode())
        except urllib.error.HTTPError as e:
            results[i] = (e.code, e.read().decode())

    threads = [threading.Thread(target=one, args=(i, True)) for i in range(2)]
    for t in threads:
        t.start()
    streaming.wait(30)
    pd["prefill"].proc.send_signal(signal.SIGSTOP)
    late = [threading.Thread(target=one, args=(i, False)) for i in range(2, 8)]
    for t in late:
        t.start()
    time.sleep(1.0)  # the six wait on the frozen prefill server
    pd["prefill"].stop(signal.SIGKILL)
    t0 = time.monotonic()
    for t in threads + late:
        t.join(60)
    assert not any(t.is_alive() for t in threads + late) and time.monotonic() - t0 < 60
    for i in range(2):
        status, text = results[i]
        assert status == 200 and text.rstrip().endswith("data: [DONE]") and '"error"' not in text, text[-500:]
        assert json.loads(text.strip().split("\n\n")[-2][len("data: "):])["meta_info"]["completion_tokens"] == 300
    for i in range(2, 8):
        status, text = results[i]
        assert status == 502 and f"prefill server {pd['prefill'].url}" in text, (status, text)
    g = settled(pd["decode"].url, {"used_pages": 0, "num_decode_prealloc_queue_reqs": 0, "num_decode_transfer_queue_reqs": 0})
    assert g["used_pages"] == 0 and g["num_decode_prealloc_queue_reqs"] == 0 and g["num_decode_transfer_queue_reqs"] == 0, g
    assert get(pd["router"].url, "/health")[0] == 200  # the router still serves: a new request fails fast, naming the prefill side
    t0 = time.monotonic()
    status, body = post(pd["router"].url, "/generate", {"text": "hi", "sampling_params": GREEDY})
    assert status == 502 and f"prefill server {pd['prefill'].url}" in body and time.monotonic() - t0 < 20, body
    assert get(pd["decode"].url, "/health")[0] == 200
    t0 = time.monotonic()  # a client that reaches the decode server directly, naming the dead prefill server
    status, body = post(pd["decode"].url, "/generate", {"text": "hi", "sampling_params": GREEDY, "bootstrap_host": "127.0.0.1",
                                                        "bootstrap_port": pd["bootstrap_port"], "bootstrap_room": 1})
    assert status == 500 and f"127.0.0.1:{pd['bootstrap_port']}" in body and ("stopped answering" in body or "does not answer" in body), body
    assert time.monotonic() - t0 < 30
    assert settled(pd["decode"].url, {"used_pages": 0})["used_pages"] == 0
