"""Multi-LoRA serving against Hugging Face + PEFT, in float32 with the reference-exact weights.

Three adapters are made here with PEFT (different ranks, seeds, target modules, one rsLoRA;
``init_lora_weights=False`` so each changes the output). One server loads two at start (one pinned) with
``--max-loras-per-batch 2`` and the third at run time, so three adapters in flight share one free slot;
a second server runs without LoRA.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
import warnings
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import pytest
import torch

from helpers.server import ServerProc

pytestmark = [pytest.mark.e2e, pytest.mark.model]

EXACT = ["--dtype", "float32", "--quantization", "none", "--max-total-tokens", "4096"]
SERVED = "smol:v1"  # a served name with a colon: model="smol:v1:a" still selects adapter a
PROMPT = "Write one sentence about the sea."
N = 10
ADAPTERS = {  # name: (rank, alpha, seed, target modules, rsLoRA)
    "a": (8, 16, 0, ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"], False),
    "b": (4, 8, 1, ["q_proj", "v_proj"], True),
    "c": (16, 8, 2, ["o_proj", "gate_proj", "up_proj", "down_proj"], False),
    "big": (32, 32, 3, ["q_proj"], False),  # above --max-lora-rank 16
}


@contextmanager
def peft_quiet():
    """PEFT calls a transformers property deprecated in v5 and warns that a GGUF directory has no config.json."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "`is_gradient_checkpointing` is deprecated", FutureWarning)
        warnings.filterwarnings("ignore", "Could not find a config file", UserWarning)
        yield


def call(url: str, path: str, body: dict | None = None, timeout: float = 300) -> tuple[int, object]:
    req = urllib.request.Request(url + path, data=json.dumps(body).encode() if body is not None else None,
                                 method="POST" if body is not None else "GET", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read().decode()
            return r.status, json.loads(raw) if raw[:1] in "{[" else raw
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read().decode())


@pytest.fixture(scope="module")
def adapters(tmp_path_factory, hf_fp32):
    from peft import LoraConfig, get_peft_model

    root = tmp_path_factory.mktemp("adapters")
    for name, (r, alpha, seed, targets, rslora) in ADAPTERS.items():
        torch.manual_seed(seed)
        with peft_quiet():
            peft = get_peft_model(hf_fp32, LoraConfig(r=r, lora_alpha=alpha, target_modules=targets, use_rslora=rslora,
                                                      init_lora_weights=False))
            peft.save_pretrained(str(root / name))
            peft.unload()  # the shared reference model goes back to its plain layers
    return {name: str(root / name) for name in ADAPTERS}


@pytest.fixture(scope="module")
def servers(tmp_path_factory, adapters):
    root = tmp_path_factory.mktemp("lora-servers")
    lora_args = [*EXACT, "--served-model-name", SERVED, "--max-loras-per-batch", "2", "--max-lora-rank", "16", "--lora-target-modules", "all",
                 "--lora-paths", f"a={adapters['a']}", json.dumps({"lora_name": "b", "lora_path": adapters["b"], "pinned": True})]
    with ThreadPoolExecutor(2) as pool:  # both load at once
        lora = pool.submit(ServerProc, lora_args, root / "lora.txt", timeout=300)
        plain = pool.submit(ServerProc, [*EXACT, "--served-model-name", SERVED], root / "plain.txt", timeout=300)
        lora_s, plain_s = lora.result(), plain.result()
    # forwards with adapter rows run the fused decode plan, which adds the adapter products itself
    assert "LoRA adapter products in the plan" in lora_s.text()
    status, out = call(lora_s.url, "/load_lora_adapter", {"lora_name": "c", "lora_path": adapters["c"]})
    assert status == 200 and out["success"] and set(out["loaded_adapters"]) == {"a", "b", "c"}, out
    yield lora_s, plain_s
    lora_s.stop()
    plain_s.stop()


def generate(url: str, lora: str | None, text: str = PROMPT, **kw) -> dict:
    body = {"text": text, "sampling_params": {"temperature": 0, "max_new_tokens": N, "ignore_eos": True}, "return_logprob": True, "logprob_start_len": 0,
            "lora_path": lora, **kw}
    status, out = call(url, "/generate", body)
    assert status == 200, out
    return out


@pytest.fixture(scope="module")
def singles(servers):
    """Each adapter's (and the base model's) single run on the LoRA server."""
    return {name: generate(servers[0].url, name) for name in ("a", "b", "c", None)}


def _reference(hf, ids: list[int], path: str | None) -> tuple[list[int], list[float]]:
    from peft import PeftModel

    with peft_quiet():
        model = PeftModel.from_pretrained(hf, path) if path else hf
    try:
        with torch.inference_mode():
            logp = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), -1)
            out = [int(logp[-1].argmax())]
            for _ in range(N - 1):  # greedy past EOS, as ignore_eos asks
                out.append(int(model(torch.tensor([ids + out])).logits[0, -1].argmax()))
    finally:
        if path:
            model.unload()
    return out, [float(logp[i - 1, ids[i]]) for i in range(1, len(ids))]


@pytest.mark.parametrize("name", ["a", "b", "c", None])
def test_greedy_tokens_and_prompt_logprobs_equal_hf_peft(singles, adapters, hf_fp32, name):
    got = singles[name]
    ids = [t for _, t, _ in got["meta_info"]["input_token_logprobs"]]
    want_ids, want_lps = _reference(hf_fp32, ids, adapters[name] if name else None)
    assert got["output_ids"] == want_ids
    lps = [lp for lp, _, _ in got["meta_info"]["input_token_logprobs"][1:]]
    assert max(abs(a - b) for a, b in zip(lps, want_lps)) < 1e-3


def test_adapters_change_the_output_and_base_equals_a_server_without_lora(servers, singles):
    base_lps = [lp for lp, _, _ in singles[None]["meta_info"]["input_token_logprobs"][1:]]
    for name in "abc":  # init_lora_weights=False: every adapter moves the prompt's log-probabilities
        lps = [lp for lp, _, _ in singles[name]["meta_info"]["input_token_logprobs"][1:]]
        assert max(abs(x - y) for x, y in zip(lps, base_lps)) > 0.05, name
    plain = generate(servers[1].url, None)
    assert plain["output_ids"] == singles[None]["output_ids"]
    assert plain["meta_info"]["input_token_logprobs"] == singles[None]["meta_info"]["input_token_logprobs"]  # bit for bit


def test_mixed_batch_equals_single_runs(servers, singles):
    out = generate(servers[0].url, ["a", "b", None], text=[PROMPT] * 3)
    assert [o["output_ids"] for o in out] == [singles[n]["output_ids"] for n in ("a", "b", None)]


def test_three_adapters_in_flight_with_two_slots_stay_correct(servers, singles):
    names = ["a", "c", None, "b", "c", "a"]  # a and c share the one unpinned slot
    with ThreadPoolExecutor(len(names)) as pool:
        outs = list(pool.map(lambda n: generate(servers[0].url, n), names))
    assert [o["output_ids"] for o in outs] == [singles[n]["output_ids"] for n in names]
    status, info = call(servers[0].url, "/get_server_info")
    state = info["internal_states"][0]
    assert state["lora_pool_slots_total"] == 2 and 1 <= state["lora_pool_slots_used"] <= 2
    status, metrics = call(servers[0].url, "/metrics")
    assert 'sglang_lora_pool_slots_total{dp_rank="0"} 2.0' in metrics


def test_the_prefix_cache_is_per_adapter(servers):
    text = "Count slowly from one to twenty, one number per line, and then say done."
    short = {"return_logprob": False, "sampling_params": {"max_new_tokens": 2}}
    first_a = generate(servers[0].url, "a", text=text, **short)
    again_a = generate(servers[0].url, "a", text=text, **short)
    first_c = generate(servers[0].url, "c", text=text, **short)
    base = generate(servers[0].url, None, text=text, **short)
    assert first_a["meta_info"]["cached_tokens"] == 0 and again_a["meta_info"]["cached_tokens"] > 0
    assert first_c["meta_info"]["cached_tokens"] == 0 and base["meta_info"]["cached_tokens"] == 0


def test_openai_routes_select_adapters_by_model_or_lora_path(servers, singles):
    url = servers[0].url
    chat = {"messages": [{"role": "user", "content": "Name a color."}], "max_tokens": 6, "temperature": 0}
    by_model = call(url, "/v1/chat/completions", {**chat, "model": f"{SERVED}:b"})[1]["choices"][0]["message"]["content"]
    by_field = call(url, "/v1/chat/completions", {**chat, "model": SERVED, "lora_path": "b"})[1]["choices"][0]["message"]["content"]
    base = call(url, "/v1/chat/completions", {**chat, "model": SERVED})[1]["choices"][0]["message"]["content"]
    assert by_model == by_field and by_model != base
    comp = call(url, "/v1/completions", {"model": f"{SERVED}:a", "prompt": PROMPT, "max_tokens": N, "temperature": 0})[1]
    assert comp["choices"][0]["text"] == singles["a"]["text"]
    status, err = call(url, "/v1/chat/completions", {**chat, "model": f"{SERVED}:nope"})
    assert status == 400 and err["error"]["param"] == "lora_path" and "nope" in err["error"]["message"]
    assert "Loaded adapters" in err["error"]["message"] and "'a'" in err["error"]["message"]
    models = {m["id"]: m for m in call(url, "/v1/models")[1]["data"]}
    assert models[SERVED]["parent"] is None and {models[n]["parent"] for n in "abc"} == {SERVED}


def test_a_server_without_lora_takes_null_and_refuses_adapters(servers):
    url = servers[1].url
    assert call(url, "/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 1}, "lora_path": None})[0] == 200
    status, err = call(url, "/generate", {"text": "hi", "lora_path": "a"})
    assert status == 400 and err["error"]["param"] == "lora_path" and "--enable-lora" in err["error"]["message"]
    status, err = call(url, "/v1/completions", {"model": f"{SERVED}:a", "prompt": "hi"})
    assert status == 400 and "--enable-lora" in err["error"]["message"]
    status, out = call(url, "/load_lora_adapter", {"lora_name": "a", "lora_path": "/x"})
    assert status == 400 and out["success"] is False and "--enable-lora" in out["error_message"]


def test_load_refuses_a_larger_rank_and_unload_waits_for_in_flight_requests(servers, adapters):
    url = servers[0].url
    status, out = call(url, "/load_lora_adapter", {"lora_name": "big", "lora_path": adapters["big"]})
    assert status == 400 and out["success"] is False and "--max-lora-rank 16" in out["error_message"] and "big" not in out["loaded_adapters"]
    # the running count comes from a stats report every 0.5 s: an earlier test's request can still show there,
    # so wait for an idle report first, then for this request to run
    while call(url, "/get_server_info")[1]["internal_states"][0]["num_running_reqs"] != 0:
        time.sleep(0.05)
    long = {}
    t = threading.Thread(target=lambda: long.update(generate(url, "c", sampling_params={"max_new_tokens": 24, "ignore_eos": True,
                                                                                       "temperature": 0})))
    t.start()
    while call(url, "/get_server_info")[1]["internal_states"][0]["num_running_reqs"] == 0 and t.is_alive():
        time.sleep(0.05)  # until the request runs (a stats report every 0.5 s)
    status, out = call(url, "/unload_lora_adapter", {"lora_name": "c"})
    assert status == 200 and out["success"] and set(out["loaded_adapters"]) == {"a", "b"}
    assert not t.is_alive() and long["meta_info"]["completion_tokens"] == 24  # it finished before the unload did
    t.join()
    status, err = call(url, "/generate", {"text": "hi", "lora_path": "c"})
    assert status == 400 and "not loaded: c" in err["error"]["message"]
    assert call(url, "/unload_lora_adapter", {"lora_name": "c"})[0] == 400


def test_the_offline_engine_serves_adapters_by_name(adapters, singles):
    import sglang
    from sglang.srt.managers.tokenizer_manager import RequestError

    params = {"temperature": 0, "max_new_tokens": N, "ignore_eos": True}
    with sglang.Engine(dtype="float32", quantization="none", max_total_tokens=4096, log_level="warning", lora_paths={"a": adapters["a"]},
                       max_lora_rank=16, lora_target_modules=["all"]) as engine:
        assert engine.generate(PROMPT, params, lora_path="a")["output_ids"] == singles["a"]["output_ids"]
        assert engine.load_lora_adapter("b", adapters["b"])["success"]
        mixed = engine.generate([PROMPT] * 3, params, lora_path=["a", "b", None])
        assert [o["output_ids"] for o in mixed] == [singles[n]["output_ids"] for n in ("a", "b", None)]
        out = engine.unload_lora_adapter("b")
        assert out["success"] and set(out["loaded_adapters"]) == {"a"}
        with pytest.raises(RequestError, match="not loaded"):
            engine.generate(PROMPT, params, lora_path="b")
