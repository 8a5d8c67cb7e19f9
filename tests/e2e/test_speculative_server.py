"""A server with ``--speculative-algorithm NGRAM`` (default model): upstream's metrics where upstream's
clients read them (``meta_info``, ``internal_states``, ``/metrics``, the decode log), reset by
``/flush_cache``; EAGLE refused at start-up, STANDALONE without its draft model too."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request

import pytest

from helpers.server import ServerProc

pytestmark = [pytest.mark.e2e, pytest.mark.model]

COPY = ("Repeat the following text exactly, word for word:\n\nThe lighthouse keeper climbed the spiral stairs every evening "
        "at dusk, carrying a lantern, a flask of tea and a notebook in which he wrote the colour of the sea.")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("spec")
    s = ServerProc(["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "6", "--log-level", "info"], root / "log.txt")
    yield s
    s.stop()


def call(server, path, body=None, post=False):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(server.url + path, data=data, method="POST" if data is not None or post else "GET")
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=300) as r:
        raw = r.read().decode()
    return json.loads(raw) if raw.startswith(("{", "[")) else raw


def state(server) -> dict:
    return call(server, "/get_server_info")["internal_states"][0]


def wait_state(server, pred, timeout: float = 10.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        st = state(server)
        if pred(st) or time.monotonic() > deadline:
            return st
        time.sleep(0.2)


def test_meta_info_server_info_metrics_and_flush(server):
    call(server, "/flush_cache", post=True)
    assert "avg_spec_accept_length" not in wait_state(server, lambda s: "avg_spec_accept_length" not in s)
    ids_body = {"text": f"<|im_start|>user\n{COPY}<|im_end|>\n<|im_start|>assistant\n",
                "sampling_params": {"max_new_tokens": 60, "temperature": 0, "ignore_eos": True}}
    meta = call(server, "/generate", ids_body)["meta_info"]
    assert meta["completion_tokens"] == 60
    assert 1 <= meta["spec_verify_ct"] < 50 and meta["spec_accept_length"] == pytest.approx(60 / meta["spec_verify_ct"])
    assert meta["spec_num_correct_drafts"] == meta["spec_accepted_drafts"] > 0
    assert 0 < meta["spec_accept_rate"] <= 1 and sum(meta["spec_accept_histogram"]) == meta["spec_verify_ct"]
    st = wait_state(server, lambda s: s.get("avg_spec_accept_length", 0) > 1)
    assert st["avg_spec_accept_length"] > 1.2
    for route in ("/server_info",):
        assert call(server, route)["internal_states"][0]["avg_spec_accept_length"] > 1.2
    metrics = call(server, "/metrics")
    length = [ln for ln in metrics.splitlines() if ln.startswith("sglang_spec_accept_length{")]
    rate = [ln for ln in metrics.splitlines() if ln.startswith("sglang_spec_accept_rate{")]
    assert length and float(length[0].split()[-1]) > 1.2 and rate and 0 < float(rate[0].split()[-1]) <= 1
    call(server, "/flush_cache", post=True)
    assert "avg_spec_accept_length" not in wait_state(server, lambda s: "avg_spec_accept_length" not in s)


def test_decode_log_reports_accept_len(server):
    body = {"text": COPY, "sampling_params": {"max_new_tokens": 90, "temperature": 0, "ignore_eos": True}}
    call(server, "/generate", body)
    deadline = time.monotonic() + 5
    while "accept len:" not in server.text() and time.monotonic() < deadline:
        time.sleep(0.2)
    line = next(ln for ln in server.text().splitlines() if "accept len:" in ln)
    assert "Decode batch. #running-req:" in line and "accept rate:" in line


def test_structured_output_and_sampling_requests_are_served(server):
    schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    out = call(server, "/generate", {"text": COPY, "sampling_params": {"max_new_tokens": 40, "temperature": 0,
                                                                        "json_schema": json.dumps(schema)}})
    assert "name" in json.loads(out["text"])
    outs = call(server, "/generate", {"text": [COPY] * 3, "sampling_params": {"max_new_tokens": 30, "temperature": 0.7, "seed": 1}})
    assert all(o["meta_info"]["completion_tokens"] == 30 or o["meta_info"]["finish_reason"]["type"] == "stop" for o in outs)


@pytest.mark.parametrize(("algo", "needs"), [("STANDALONE", "--speculative-draft-model-path"), ("EAGLE", "NGRAM")])
def test_draft_model_algorithms_are_refused_at_start_up_naming_what_they_need(algo, needs):
    r = subprocess.run([sys.executable, "-m", "sglang.launch_server", "--speculative-algorithm", algo], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode != 0
    assert f"--speculative-algorithm {algo} needs" in r.stderr + r.stdout and needs in r.stderr + r.stdout
