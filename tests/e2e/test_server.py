"""The HTTP server, driven with the official openai client and raw HTTP."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest

from helpers.server import ServerProc, by_role

KEY = "sk-test-key"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = ServerProc(["--api-key", KEY, "--served-model-name", "smol", "--log-requests", "--log-level", "info"], tmp_path_factory.mktemp("srv") / "log.txt")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=120)


def http(server, path, body=None, key=KEY, raw: bytes | None = None):
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(server.url + path, data=data, method="POST" if data is not None else "GET")
    req.add_header("Content-Type", "application/json")
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


GREEDY = {"temperature": 0, "max_tokens": 16}


def test_chat_completion(client):
    r = client.chat.completions.create(model="smol", messages=[{"role": "user", "content": "What is the capital of France?"}], **GREEDY)
    assert r.object == "chat.completion" and r.model == "smol"
    assert "Paris" in r.choices[0].message.content and r.choices[0].message.role == "assistant"
    assert 0 < r.usage.completion_tokens <= 16
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_completion_and_its_logprobs(client):
    r = client.completions.create(model="smol", prompt="1, 2, 3,", logprobs=2, **GREEDY)
    c = r.choices[0]
    assert c.text.startswith(" 4") and c.finish_reason == "length"
    assert len(c.logprobs.tokens) == r.usage.completion_tokens == 16 and all(len(t) <= 2 for t in c.logprobs.top_logprobs)


def test_streaming_chat_ends_with_a_usage_chunk(client):
    msgs = [{"role": "user", "content": "Count from one to five."}]
    full = client.chat.completions.create(model="smol", messages=msgs, **GREEDY).choices[0].message.content
    chunks = list(client.chat.completions.create(model="smol", messages=msgs, stream=True, stream_options={"include_usage": True}, **GREEDY))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 16
    assert sum(bool(c.choices and c.choices[0].delta.content) for c in chunks) >= 8  # token by token (--stream-interval 1)
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"


def test_streams_carry_each_chunks_logprobs_and_the_echoed_prompt(client):
    """As upstream streams them: every chunk's tokens' log-probabilities (chat: ``content`` items; completions: the
    legacy object with text offsets into the whole choice), and with ``echo`` the prompt heads the first chunk; joined,
    they are the non-streamed answer's."""
    msgs = [{"role": "user", "content": "Name three colors."}]
    whole = client.chat.completions.create(model="smol", messages=msgs, logprobs=True, top_logprobs=2, **GREEDY).choices[0].logprobs.content
    parts = [c.choices[0].logprobs for c in client.chat.completions.create(model="smol", messages=msgs, logprobs=True, top_logprobs=2,
                                                                           stream=True, **GREEDY) if c.choices]
    got = [x for lp in parts if lp is not None for x in lp.content]
    # the same tokens; the values agree to float noise (the second request reads its prompt from the prefix cache)
    assert len(got) == len(whole) > 8 and [(x.token, [t.token for t in x.top_logprobs]) for x in got] == \
        [(x.token, [t.token for t in x.top_logprobs]) for x in whole]
    assert all(abs(a.logprob - b.logprob) < 1e-3 for a, b in zip(got, whole))

    kw = {"model": "smol", "prompt": "1, 2, 3,", "logprobs": 2, "echo": True, **GREEDY}
    full = client.completions.create(**kw).choices[0]
    chunks = [c.choices[0] for c in client.completions.create(stream=True, **kw) if c.choices]
    assert chunks[0].text.startswith("1, 2, 3,") and "".join(c.text for c in chunks) == full.text
    merged = {k: [v for c in chunks if c.logprobs for v in getattr(c.logprobs, k)] for k in ("tokens", "token_logprobs", "text_offset")}
    assert {k: merged[k] for k in ("tokens", "text_offset")} == {k: getattr(full.logprobs, k) for k in ("tokens", "text_offset")}
    assert merged["token_logprobs"][0] is None and len(merged["token_logprobs"]) == len(full.logprobs.token_logprobs) > 16
    assert all(abs(a - b) < 1e-3 for a, b in zip(merged["token_logprobs"][1:], full.logprobs.token_logprobs[1:]))
    assert [c.choices[0].text for c in client.completions.create(stream=True, model="smol", prompt="1, 2, 3,", echo=True, **GREEDY)
            if c.choices][0].startswith("1, 2, 3,")  # echo without logprobs too


def test_n_seed_and_stop(client):
    r = client.chat.completions.create(model="smol", messages=[{"role": "user", "content": "Tell me a joke."}], n=2, seed=5, temperature=1.0, max_tokens=12)
    again = client.chat.completions.create(model="smol", messages=[{"role": "user", "content": "Tell me a joke."}], n=2, seed=5, temperature=1.0, max_tokens=12)
    assert len(r.choices) == 2 and [c.message.content for c in r.choices] == [c.message.content for c in again.choices]
    s = client.completions.create(model="smol", prompt="1, 2, 3,", stop=[" 6"], temperature=0, max_tokens=32)
    assert s.choices[0].finish_reason == "stop" and " 6" not in s.choices[0].text and s.choices[0].text.rstrip().endswith("5,")


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"max_tokens": -1}, openai.BadRequestError, "max_tokens: Input should be greater than or equal to 0"),
        ({"max_tokens": 100000}, openai.BadRequestError, "exceeds the context"),
        ({"temperature": -2}, openai.BadRequestError, "temperature: Input should be greater than or equal to 0"),
        ({"model": "gpt-9"}, openai.NotFoundError, "The model 'gpt-9' does not exist"),
    ],
)
def test_bad_requests_get_4xx_and_the_server_keeps_serving(client, kwargs, error, message):
    args = {"model": "smol", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **kwargs}
    with pytest.raises(error, match=message):
        client.chat.completions.create(**args)
    assert client.chat.completions.create(model="smol", messages=[{"role": "user", "content": "hi"}], max_tokens=2).choices


def test_malformed_json_and_wrong_types_are_400(server):
    code, body = http(server, "/v1/chat/completions", raw=b"{not json")
    assert code == 400 and json.loads(body)["error"]["type"] == "invalid_request_error"
    code, body = http(server, "/v1/chat/completions", {"messages": "hello", "max_tokens": 2})
    assert code == 400 and "messages" in json.loads(body)["error"]["message"]
    code, body = http(server, "/v1/completions", {"prompt": "x", "max_tokens": "many"})
    assert code == 400 and json.loads(body)["error"]["param"] == "max_tokens"


def test_api_key_is_required_everywhere_but_health(server):
    assert http(server, "/health", key=None)[0] == 200
    code, body = http(server, "/v1/models", key="wrong")
    assert code == 401 and json.loads(body)["error"]["code"] == "invalid_api_key"
    assert http(server, "/get_server_info", key=None)[0] == 401
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server.url + "/v1", api_key="nope", max_retries=0).models.list()


def test_models_and_native_generate(server, client):
    assert [m.id for m in client.models.list().data] == ["smol"]
    code, body = http(server, "/generate", {"text": "The capital of France is", "sampling_params": {"temperature": 0, "max_new_tokens": 4}})
    out = json.loads(body)
    assert code == 200 and out["text"] and len(out["output_ids"]) == 4
    code, body = http(server, "/generate", {"input_ids": out["output_ids"], "sampling_params": {"max_new_tokens": 2}})
    assert code == 200 and json.loads(body)["meta_info"]["prompt_tokens"] == 4
    assert http(server, "/generate", {"sampling_params": {}})[0] == 400
    assert http(server, "/health_generate")[0] == 200


def test_server_info_has_provenance_platform_and_plugins(server):
    info = json.loads(http(server, "/get_server_info")[1])
    assert info["server_args"]["api_key"] == {"value": "***", "source": "cli", "ns": "serving"}  # never the key itself
    assert info["server_args"]["chunked_prefill_size"]["source"] == "derived default"
    assert info["platform"]["platform"] == "sglang.srt.platforms.cpu.CpuSRTPlatform"
    assert info["runtime"]["max_total_tokens"] > 0 and isinstance(info["plugins"], list)


def test_log_requests_logs_each_request_and_its_output(server, client):
    client.completions.create(model="smol", prompt="Log me", max_tokens=2)
    log = server.text()
    assert "request " in log and "prompt tokens, sampling" in log and "finished " in log


def test_flush_cache_and_metrics(server, client):
    client.completions.create(model="smol", prompt="Hello", max_tokens=2)
    assert http(server, "/flush_cache", {})[0] == 200
    code, text = http(server, "/metrics")
    assert code == 200
    for name in ("sglang_requests_total", "sglang_generation_tokens_total", "sglang_num_queue_reqs", "sglang_token_usage",
                 "sglang_time_to_first_token_seconds_bucket", "sglang_inter_token_latency_seconds_count"):
        assert name in text


def _metric(server, name):
    """A series' value; a labelled one (the load gauges carry ``dp_rank``) summed over its labels."""
    text = http(server, "/metrics")[1]
    values = [float(line.split()[-1]) for line in text.splitlines() if line.startswith((name + " ", name + "{"))]
    assert values, name
    return sum(values)


def test_client_disconnect_aborts_the_request_and_frees_its_pages(server):
    import http.client

    before = _metric(server, "sglang_aborted_requests_total")
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    body = json.dumps({"model": "smol", "prompt": "Tell me a very long story.", "max_tokens": 2000, "ignore_eos": True, "stream": True})
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"})
    resp = conn.getresponse()
    resp.read1(200)  # a first chunk arrived: the request is running
    conn.sock.close()
    conn.close()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (_metric(server, "sglang_aborted_requests_total") <= before or _metric(server, "sglang_num_running_reqs") > 0):
        time.sleep(0.3)
    assert _metric(server, "sglang_aborted_requests_total") > before
    assert _metric(server, "sglang_num_running_reqs") == 0


def test_64_requests_at_concurrency_16_equal_their_solo_outputs(client):
    prompts = [f"Write one sentence about the number {i}." for i in range(16)]

    def ask(p):
        return client.chat.completions.create(model="smol", messages=[{"role": "user", "content": p}], temperature=0, max_tokens=12).choices[0].message.content

    solo = {p: ask(p) for p in prompts}
    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(ask, prompts * 4))
    assert results == [solo[p] for p in prompts * 4]


def test_the_readmes_curl_answers_with_the_models_sampling_defaults(server):
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    body = json.loads(re.search(r"curl http://127\.0\.0\.1:30000/v1/chat/completions .*?-d '(.*?)'", readme, re.S).group(1))
    assert "temperature" not in body  # the README's request, unchanged
    code, out = http(server, "/v1/chat/completions", body)
    answer = json.loads(out)["choices"][0]["message"]["content"]
    assert code == 200 and answer.strip()
    line = [x for x in server.text().splitlines() if "prompt tokens, sampling" in x][-1]
    assert "'temperature': 0.2" in line and "'top_p': 0.9" in line  # what the sampler was given
    code, info = http(server, "/get_model_info")
    info = json.loads(info)
    assert info["preferred_sampling_params"] is None and info["default_sampling_params"] == {"temperature": 0.2, "top_p": 0.9}


def test_the_http_process_serves_without_loading_torch(server):
    """The launcher spawns its ranks through a module that imports no model code, probes for an accelerator from
    torch's version file, and its tokenizer manager and HTTP routes need no tensors: after every request this module
    sent (chat, completions with logprobs, streams, metrics), torch's library is still not mapped in the server's own
    process (about 2 s of start-up and its memory), while the scheduler's is. Claimed for the CPU wheel this project pins
    (another build imports torch to ask for its device)."""
    from sglang.srt.platforms.selection import torch_build_backends

    if torch_build_backends() != frozenset():
        pytest.skip(f"torch here is built for {sorted(torch_build_backends() or ['an unknown accelerator'])}: --device auto imports it")

    def maps(pid: int) -> str:
        with open(f"/proc/{pid}/maps") as f:
            return f.read()

    assert "libtorch" not in maps(server.proc.pid)
    assert any("libtorch" in maps(pid) for pid in server.children())  # the scheduler rank: the probe sees torch


def test_the_step_threads_and_the_front_ends_are_bound_as_cpu_binding_says(server):
    """The default binding of a single scheduler whose step uses every core (the 2-core machines): step thread t on
    core t (the scheduler's main thread is thread 0), and every thread of the HTTP server and of the detokenizer on the
    step's last core, where their wakes per streamed token take a spinning thread's core rather than the one running
    the scheduler's Python between steps. With one core there is nothing to choose and nothing is bound."""
    import os

    from sglang.srt.managers.cpu_binding import allowed_cpus

    cores = set(allowed_cpus())  # the server inherits this process's
    sched, detok = by_role(server)

    def threads(pid: int) -> list[set[int]]:
        return [os.sched_getaffinity(int(t)) for t in os.listdir(f"/proc/{pid}/task")]

    if len(cores) < 2:
        assert all(a == cores for pid in (server.proc.pid, detok, sched) for a in threads(pid))
        return
    last = {max(cores)}
    assert all(a == last for a in threads(server.proc.pid))
    assert all(a == last for a in threads(detok))
    assert os.sched_getaffinity(sched) == {min(cores)}
    assert {frozenset(a) for a in threads(sched) if len(a) == 1} == {frozenset({c}) for c in cores}
    assert f"bound to cores {sorted(cores)}, the HTTP server and detokenizer to {sorted(last)}" in server.text()
