"""The SGLang-native HTTP API in upstream's shapes, driven the way upstream's clients drive it.

``bench_serving --backend sglang`` streams ``/generate`` with ``ignore_eos`` and reads
``/get_server_info``'s ``internal_states``; the frontend's ``RuntimeEndpoint`` reads
``/get_model_info``; ``lm-eval``'s ``local-completions`` scores log-likelihoods through
``/v1/completions`` with ``echo`` and ``logprobs``.
"""

from __future__ import annotations

import json
import os
import threading
import urllib.error
import urllib.request

import openai
import pytest

from helpers.reference import hf_prompt_logprobs
from helpers.server import ServerProc

pytestmark = [pytest.mark.e2e, pytest.mark.model]

SENTENCE = "The quick brown fox jumps over the lazy dog because it was bored"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("native")
    s = ServerProc(["--dtype", "float32", "--served-model-name", "smol", "--profile-dir", str(root / "traces")], root / "log.txt")
    s.profile_dir = root / "traces"
    yield s
    s.stop()


def call(server, path, body=None, timeout=120):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(server.url + path, data=data, method="POST" if data is not None else "GET")
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read().decode()
            return r.status, (json.loads(raw) if raw.startswith(("{", "[")) else raw)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read().decode())


def stream_generate(server, body):
    req = urllib.request.Request(server.url + "/generate", data=json.dumps({**body, "stream": True}).encode(), method="POST")
    req.add_header("Content-Type", "application/json")
    events = []
    with urllib.request.urlopen(req, timeout=120) as r:
        for line in r:
            line = line.decode().strip()
            if line.startswith("data: "):
                events.append(line[6:])
    return events


def hf_logprobs(hf, ids):
    return hf_prompt_logprobs(hf, ids)[0]


def test_streaming_generate_as_bench_serving_drives_it_then_internal_states(server):
    body = {"text": "Tell me a story about a robot.", "sampling_params": {"max_new_tokens": 24, "temperature": 0, "ignore_eos": True}}
    events = stream_generate(server, body)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    texts = [c["text"] for c in chunks]
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:]))  # cumulative text, as upstream streams it
    last = chunks[-1]["meta_info"]
    assert last["completion_tokens"] == 24 and last["finish_reason"]["type"] == "length" and last["e2e_latency"] > 0
    # a streaming request is sent every step (--stream-interval 1), one that does not stream when it ends
    assert [c["meta_info"]["completion_tokens"] for c in chunks] == list(range(1, 25))
    assert {"id", "prompt_tokens", "cached_tokens"} <= set(last)
    status, info = call(server, "/get_server_info")
    assert status == 200 and info["version"] and info["model_path"] and info["dtype"] == "float32"
    assert info["served_model_name"] == "smol" and "server_args" in info and "platform" in info  # provenance stays, under its key
    (state,) = info["internal_states"]
    assert state["last_gen_throughput"] > 0 and "avg_spec_accept_length" not in state  # speculation off: absent, as upstream
    assert state["max_total_num_tokens"] > 0 and state["context_length"] > 0


def test_get_model_info_and_the_aliases(server):
    status, info = call(server, "/get_model_info")
    assert status == 200 and info["is_generation"] is True and info["preferred_sampling_params"] is None
    assert info["model_path"] and info["tokenizer_path"]
    assert call(server, "/model_info")[1] == info
    assert set(call(server, "/server_info")[1]) == set(call(server, "/get_server_info")[1])


def test_a_batch_returns_a_list_in_order(server):
    status, out = call(server, "/generate", {"text": ["1, 2, 3,", "a, b, c,"], "sampling_params": {"max_new_tokens": 4, "temperature": 0}})
    assert status == 200 and isinstance(out, list) and len(out) == 2
    for item, prompt in zip(out, ["1, 2, 3,", "a, b, c,"]):
        single = call(server, "/generate", {"text": prompt, "sampling_params": {"max_new_tokens": 4, "temperature": 0}})[1]
        assert item["output_ids"] == single["output_ids"] and item["meta_info"]["id"] != single["meta_info"]["id"]


def test_generate_prompt_logprobs_match_transformers_float32(server, hf_fp32):
    body = {"text": SENTENCE, "sampling_params": {"max_new_tokens": 1, "temperature": 0},
            "return_logprob": True, "logprob_start_len": 0, "top_logprobs_num": 2, "return_text_in_logprobs": True}
    status, out = call(server, "/generate", body)
    assert status == 200, out
    meta = out["meta_info"]
    first, *rest = meta["input_token_logprobs"]
    ids = [first[1]] + [t for _, t, _ in rest]
    assert first[0] is None and len(ids) == meta["prompt_tokens"]
    ref = hf_logprobs(hf_fp32, ids)
    assert max(abs(lp - want) for (lp, _, _), want in zip(rest, ref)) < 1e-3
    assert all(isinstance(text, str) for _, _, text in rest)  # return_text_in_logprobs fills the third field
    assert meta["input_top_logprobs"][0] is None and all(len(top) == 2 for top in meta["input_top_logprobs"][1:])
    assert len(meta["output_token_logprobs"]) == 1


def test_completions_echo_scores_the_prompt_as_lm_eval_asks(server, hf_fp32):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=120)
    r = client.completions.create(model="smol", prompt=SENTENCE, echo=True, logprobs=1, max_tokens=0, temperature=0)
    lp = r.choices[0].logprobs
    assert r.choices[0].text == SENTENCE and lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert "".join(lp.tokens) == SENTENCE and r.usage.completion_tokens == 0
    status, tok = call(server, "/generate", {"text": SENTENCE, "sampling_params": {"max_new_tokens": 0}, "return_logprob": True, "logprob_start_len": 0})
    ids = [t for _, t, _ in tok["meta_info"]["input_token_logprobs"]]
    ref = hf_logprobs(hf_fp32, ids)
    assert max(abs(a - b) for a, b in zip(lp.token_logprobs[1:], ref)) < 1e-3
    # a batch of token-id prompts, one generated token each, as lm-eval sends them
    batch = client.completions.create(model="smol", prompt=[ids, ids[:5]], echo=True, logprobs=1, max_tokens=1, temperature=0)
    assert [c.index for c in batch.choices] == [0, 1] and len(batch.choices[1].logprobs.tokens) == 6
    assert batch.choices[0].logprobs.token_logprobs[1:-1] == pytest.approx(lp.token_logprobs[1:], abs=1e-4)


def test_abort_request_by_rid_ends_that_request(server):
    result: dict[str, object] = {}

    def run() -> None:
        result["events"] = stream_generate(server, {"text": "Count forever:", "rid": "abort-me",
                                                    "sampling_params": {"max_new_tokens": 3000, "ignore_eos": True}})

    # the running count comes from a stats report every 0.5 s, where an earlier test's request can still show:
    # wait for an idle report, then for this request to run (aborting an rid not yet known ends nothing)
    for _ in range(100):
        if not call(server, "/get_server_info")[1]["internal_states"][0]["num_running_reqs"]:
            break
        threading.Event().wait(0.1)
    t = threading.Thread(target=run)
    t.start()
    for _ in range(100):
        if call(server, "/get_server_info")[1]["internal_states"][0]["num_running_reqs"]:
            break
        threading.Event().wait(0.1)
    assert call(server, "/abort_request", {"rid": "abort-me"})[0] == 200
    t.join(60)
    assert not t.is_alive()
    last = json.loads(result["events"][-2])  # type: ignore[index]
    assert last["meta_info"]["finish_reason"]["type"] == "abort" and last["meta_info"]["completion_tokens"] < 3000
    assert call(server, "/abort_request", {})[0] == 400


def test_profile_writes_a_trace_inside_the_profile_dir_only(server):
    assert call(server, "/stop_profile", {})[0] == 400  # nothing running
    for outside in ("/tmp/elsewhere", "../escape"):
        status, err = call(server, "/start_profile", {"output_dir": outside})
        assert status == 400 and "inside --profile-dir" in err["error"]["message"]
    assert call(server, "/start_profile", {"output_dir": "run1"})[0] == 200
    call(server, "/generate", {"text": "Hi", "sampling_params": {"max_new_tokens": 4}})
    status, out = call(server, "/stop_profile", {})
    assert status == 200 and len(out["traces"]) == 1
    assert os.path.dirname(out["traces"][0]) == str((server.profile_dir / "run1").resolve())
    with open(out["traces"][0]) as fh:
        trace = json.load(fh)
    assert trace["traceEvents"]
