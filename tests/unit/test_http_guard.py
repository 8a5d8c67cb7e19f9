"""The HTTP boundary in process: request guard (Host, key, size) and OpenAI error bodies on every 4xx/5xx."""

from __future__ import annotations

import json

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest, GenerateRequest
from sglang.utils.http_common import allowed_hosts, install_common, sse_data

KEY = "sk-guard-secret"


def _app(**kw) -> tuple[TestClient, list[tuple[str, int]]]:
    seen: list[tuple[str, int]] = []
    app = FastAPI()
    install_common(app, kw.pop("api_key", KEY), kw.pop("max_body", 4096), kw.pop("host", "127.0.0.1"), kw.pop("hosts", None),
                   on_error=lambda p, s: seen.append((p, s)))

    @app.post("/generate")
    async def generate(req: GenerateRequest) -> dict:
        return {"ok": True, "params": req.items()[0][2]}

    @app.post("/v1/chat/completions")
    async def chat(req: ChatCompletionRequest) -> dict:
        return {"ok": True}

    @app.get("/boom")
    async def boom() -> dict:
        raise RuntimeError("internal detail that must stay in the log")

    @app.get("/health")
    async def health() -> dict:
        return {}

    return TestClient(app, base_url="http://127.0.0.1:30000", raise_server_exceptions=False), seen


AUTH = {"Authorization": f"Bearer {KEY}"}


def _is_openai_error(r, status: int) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and isinstance(err["message"], str) and err["message"]
    assert KEY not in r.text
    return err


def test_every_framework_error_has_the_openai_body():
    c, seen = _app()
    assert _is_openai_error(c.get("/nope", headers=AUTH), 404)["type"] == "not_found_error"
    assert "GET /nope" in _is_openai_error(c.get("/nope", headers=AUTH), 404)["message"]
    _is_openai_error(c.get("/generate", headers=AUTH), 405)
    as_json = {**AUTH, "Content-Type": "application/json"}
    assert "not valid JSON" in _is_openai_error(c.post("/generate", content=b"{not json", headers=as_json), 400)["message"]
    assert "must be a JSON object" in _is_openai_error(c.post("/generate", content=b"[1, 2]", headers=as_json), 400)["message"]
    assert "Content-Type: application/json" in _is_openai_error(c.post("/generate", content=b"text=hi", headers=AUTH), 400)["message"]
    _is_openai_error(c.post("/generate", content=b'{"text": "\xff\xfe"}', headers={**AUTH, "Content-Type": "application/json"}), 400)
    err = _is_openai_error(c.get("/boom", headers=AUTH), 500)
    assert err["type"] == "server_error" and "internal detail" not in err["message"]
    assert ("/boom", 500) in seen and ("/nope", 404) in seen


def test_the_api_key_guards_every_route_but_health_and_is_never_echoed():
    c, _ = _app()
    assert c.get("/health").status_code == 200
    assert _is_openai_error(c.post("/generate", json={"text": "hi"}), 401)["code"] == "invalid_api_key"
    assert _is_openai_error(c.post("/generate", json={"text": "hi"}, headers={"Authorization": f"Bearer {KEY}x"}), 401)
    assert c.post("/generate", json={"text": "hi"}, headers=AUTH).status_code == 200


def test_bodies_over_the_limit_get_413_declared_or_streamed():
    c, seen = _app(max_body=4096)
    big = {"text": "x" * 5000}
    err = _is_openai_error(c.post("/generate", json=big, headers=AUTH), 413)
    assert "--max-request-bytes" in err["message"]

    def chunks():  # no Content-Length: the guard counts what arrives
        for _ in range(10):
            yield b" " * 1000

    _is_openai_error(c.post("/generate", content=chunks(), headers={**AUTH, "Content-Type": "application/json"}), 413)
    assert c.post("/generate", json={"text": "x" * 3000}, headers=AUTH).status_code == 200
    assert ("/generate", 413) in seen


def test_host_headers_outside_the_allowed_set_get_400():
    c, _ = _app()
    assert _is_openai_error(c.get("/health", headers={"Host": "evil.example:30000"}), 400)["code"] == "invalid_host"
    for ok in ("127.0.0.1:30000", "localhost", "[::1]:30000"):
        assert c.get("/health", headers={"Host": ok}).status_code == 200, ok
    c2, _ = _app(hosts="api.internal")
    assert c2.get("/health", headers={"Host": "api.internal:8000"}).status_code == 200
    assert c2.get("/health", headers={"Host": "127.0.0.1"}).status_code == 400


def test_allowed_hosts_defaults():
    assert allowed_hosts("0.0.0.0", None) is None  # every interface: any Host
    assert allowed_hosts("127.0.0.1", "*") is None
    assert allowed_hosts("127.0.0.1", None) == {"127.0.0.1", "localhost", "::1"}
    assert allowed_hosts("10.1.2.3", None) == {"10.1.2.3", "localhost", "127.0.0.1", "::1"}


@pytest.mark.parametrize(
    ("body", "param", "fragment"),
    [
        ({"text": "hi", "sampling_params": {"skip_special_tokens": "junk"}}, "sampling_params.skip_special_tokens", "valid boolean"),
        ({"text": "hi", "sampling_params": {"skip_special_tokens": 1}}, "sampling_params.skip_special_tokens", "valid boolean"),
        ({"text": "hi", "sampling_params": {"seed": 18446744073709551616}}, "sampling_params.seed", "less than or equal"),
        ({"text": "hi", "sampling_params": {"seed": -(2**63) - 1}}, "sampling_params.seed", "greater than or equal"),
        ({"text": "hi", "sampling_params": {"repetition_penalty": 1e-300}}, "sampling_params.repetition_penalty", "greater than or equal"),
        ({"text": "hi", "sampling_params": {"temperature": True}}, "sampling_params.temperature", "valid number"),
        ({"text": "hi", "sampling_params": {"stop_token_ids": [-5]}}, "sampling_params.stop_token_ids.0", "greater than or equal"),
        ({"text": "hi", "sampling_params": {"max_new_tokens": 1.5}}, "sampling_params.max_new_tokens", "valid integer"),
        ({"text": "hi", "sampling_params": {"json_schema": {"type": "object"}}}, "sampling_params.json_schema", "valid string"),
        ({"text": "hi", "sampling_params": {"regex": "a", "ebnf": "b"}}, "sampling_params", "at most one constraint"),
        ({"text": "h\ud800i"}, "text", "not valid Unicode"),
        ({"text": 5}, "text", "valid string"),
        ({"text": "hi", "stream": "yes"}, "stream", "valid boolean"),
        ({"text": "hi", "lora_path": 5}, "lora_path", "valid string"),
        ({"text": ["a", "b"], "lora_path": ["x"]}, None, "lora_path has 1 entries for 2 prompts"),
        ({"text": "hi", "lora_id": "0123abcd"}, "lora_id", "minted by the server"),  # a client never names the cache namespace
        ({"text": "hi", "return_hidden_states": True}, "return_hidden_states", "send false or omit the field"),
        ({"text": "hi", "sampling_params": {"n": 2}}, "sampling_params.n", "is not supported"),
    ],
)
def test_generate_rejects_each_bad_field_by_name(body, param, fragment):
    c, _ = _app()
    raw = json.dumps(body).encode()  # ascii escapes: a lone surrogate travels as "\\ud800", as a client sends it
    err = _is_openai_error(c.post("/generate", content=raw, headers={**AUTH, "Content-Type": "application/json"}), 400)
    assert err["param"] == param and fragment in err["message"], err


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}, "messages.0.content"),
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": None}]}]}, "messages.0.content"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, "messages.0.content"),
        ({"messages": [{"role": "user", "content": "hi"}], "tools": "junk"}, "tools"),
        ({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f"}}],
          "tool_choice": {"type": "function", "function": {"name": "g"}}}, "tool_choice names the function 'g', which is not in tools ['f']"),
        ({"messages": [{"role": "user", "content": "hi"}], "tool_choice": "required"}, "tool_choice 'required' needs tools"),
        ({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f"}}] * 2}, "a function name twice"),
        ({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f"}}],
          "tool_choice": "required", "regex": "a"}, "at most one constraint per request; got tool_choice and ['regex']"),
        ({"messages": [{"role": "user", "content": "hi", "tool_call_id": "c1"}]}, "tool_call_id is allowed only in tool messages"),
        ({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools.0.function.name"),
        ({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "bogus"}}, "response_format.type: Input should be 'text', 'json_object' or 'json_schema'"),
        ({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema"}}, "json_schema is required"),
        ({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "text", "json_schema": {"name": "x"}}},
         "allowed only with it"),
        ({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema", "json_schema": {"schema": {}}}},
         "response_format.json_schema.name"),
        ({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_object"}, "regex": "a+"},
         "at most one constraint per request; got ['regex', 'response_format']"),
        ({"messages": [{"role": "user", "content": "hi"}], "regex": ""}, "regex"),
        ({"messages": [{"role": "user", "content": "hi"}], "logit_bias": {"abc": 1}}, "logit_bias"),
        ({"messages": [{"role": "user", "content": "hi"}], "logit_bias": {"5": 1000}}, "logit_bias"),
        ({"messages": [{"role": "user", "content": "hi"}], "temperature": float("inf")}, "temperature"),
        ({"messages": [{"role": "user", "content": "hi"}], "n": 10**9}, "n"),
        ({"messages": [{"role": "user", "content": "hi"}], "stop": ["x"] * 40}, "stop"),
        ({"messages": [{"role": "user", "content": "hi"}], "functions": []}, "unsupported field 'functions'"),
        ({"messages": []}, "messages"),
    ],
)
def test_chat_rejects_bad_and_unsupported_fields(body, fragment):
    c, _ = _app(max_body=1 << 20)
    raw = json.dumps(body, allow_nan=True).encode()
    err = _is_openai_error(c.post("/v1/chat/completions", content=raw, headers={**AUTH, "Content-Type": "application/json"}), 400)
    assert fragment in err["message"], err


def test_upstream_fields_sent_with_their_neutral_value_are_accepted_and_dropped():
    c, _ = _app()
    body = {"text": "hi", "sampling_params": {"temperature": 0, "n": 1, "min_new_tokens": 0}, "lora_path": None, "return_hidden_states": False,
            "custom_logit_processor": None, "return_routed_experts": False, "logprob_start_len": -1}
    r = c.post("/generate", json=body, headers=AUTH)
    assert r.status_code == 200 and r.json()["params"] == {"temperature": 0}
    chat = {"messages": [{"role": "user", "content": "hi"}], "lora_path": None, "return_hidden_states": False, "separate_reasoning": True}
    assert c.post("/v1/chat/completions", json=chat, headers=AUTH).status_code == 200
    assert c.post("/v1/chat/completions", json={**chat, "lora_path": "adapter"}, headers=AUTH).status_code == 200  # the engine decides
    err = _is_openai_error(c.post("/v1/chat/completions", json={**chat, "return_hidden_states": "false"}, headers=AUTH), 400)
    assert err["param"] == "return_hidden_states"  # a string is not the neutral boolean


def test_legal_requests_pass_with_their_values():
    c, _ = _app()
    r = c.post("/generate", json={"text": "hi", "sampling_params": {"temperature": 0, "seed": 2**63 - 1, "stop": "x", "logit_bias": {"5": -3}}},
               headers=AUTH)
    assert r.status_code == 200 and r.json()["params"] == {"temperature": 0, "seed": 2**63 - 1, "stop": "x", "logit_bias": {"5": -3.0}}
    ok = {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}], "user": "u1", "tool_choice": "none",
          "response_format": {"type": "text"}, "temperature": 1, "seed": -5}
    assert c.post("/v1/chat/completions", json=ok, headers=AUTH).status_code == 200


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"text": ["a", "b"], "stream": True}, "stream takes a single prompt"),
        ({"text": ["a", "b"], "sampling_params": [{"max_new_tokens": 1}]}, "sampling_params has 1 entries for 2 prompts"),
        ({"text": "a", "rid": ["x", "y"]}, "rid has 2 entries for 1 prompts"),
        ({"text": "a", "input_ids": [1]}, "exactly one of 'text' or 'input_ids'"),
        ({}, "exactly one of 'text' or 'input_ids'"),
        ({"text": ["a"] * 65}, "at most 64"),
        ({"text": "a", "return_logprob": True, "logprob_start_len": -2}, "greater than or equal to -1"),
        ({"text": "a", "top_logprobs_num": 21}, "less than or equal to 20"),
        ({"input_ids": [[1, 2], []]}, "input_ids"),
    ],
)
def test_generate_rejects_a_malformed_batch_or_logprob_request(body, fragment):
    c, _ = _app()
    err = _is_openai_error(c.post("/generate", json=body, headers=AUTH), 400)
    assert fragment in err["message"], err


def test_generate_batches_fold_the_top_level_logprob_fields_into_each_prompt():
    req = GenerateRequest.model_validate({"input_ids": [[1, 2], [3]], "sampling_params": {"max_new_tokens": 2}, "rid": ["p", "q"],
                                          "return_logprob": True, "logprob_start_len": 0, "top_logprobs_num": 3})
    assert req.batch_size == 2
    assert req.items() == [
        (None, [1, 2], {"max_new_tokens": 2, "logprobs": True, "top_logprobs_num": 3, "logprob_start_len": 0}, "p"),
        (None, [3], {"max_new_tokens": 2, "logprobs": True, "top_logprobs_num": 3, "logprob_start_len": 0}, "q"),
    ]
    single = GenerateRequest.model_validate({"input_ids": [5, 6]})
    assert single.batch_size is None and single.items() == [(None, [5, 6], {}, None)]


def test_a_hook_raising_in_the_http_process_is_a_500_naming_its_plugin(registry, target_module):
    from sglang.plugin_core.hooks.types import PluginSource
    from sglang.srt.plugins.hook_registry import HookType

    def broken(*a, **k):
        raise KeyError("missing thing")

    with registry.registering_as(PluginSource("acme", "acme-dist")):
        registry.register(f"{target_module.__name__}.add", broken, HookType.BEFORE)
    registry.apply_hooks()
    app = FastAPI()
    install_common(app, None)

    @app.get("/add")
    async def add() -> dict:
        return {"sum": target_module.add(1, 2)}

    r = TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False).get("/add")
    err = _is_openai_error(r, 500)
    assert err["code"] == "plugin_error" and "plugin acme" in err["message"] and "acme-dist" in err["message"]
    assert "KeyError" in err["message"] and f"{target_module.__name__}.add" in err["message"]


def test_profiling_without_a_profile_dir_is_a_400_naming_the_flag():
    from types import SimpleNamespace

    from sglang.srt.entrypoints.native_api import install_native_routes

    app = FastAPI()
    install_common(app, None, 4096, "127.0.0.1", None)
    engine = SimpleNamespace(tokenizer_manager=SimpleNamespace(), start_profile=lambda *a: None)
    install_native_routes(app, engine, SimpleNamespace(profile_dir=None), lambda p, s: None, None)  # type: ignore[arg-type]
    c = TestClient(app, base_url="http://127.0.0.1:30000")
    err = _is_openai_error(c.post("/start_profile", json={"output_dir": "/etc"}), 400)
    assert "--profile-dir" in err["message"] and err["param"] == "output_dir"


@pytest.mark.parametrize("value", ["plain", "naïve ✓", 7, None, [1, (2, 3)], "lone \ud800 surrogate", 2**70])
def test_a_stream_event_carries_its_object_as_json(value):
    # orjson where it can; what it refuses (a lone surrogate, an integer past 64 bits) falls back to json
    event = sse_data({"v": value, 3: "int key"})
    assert event.startswith("data: ") and event.endswith("\n\n") and "\n" not in event[:-2]
    assert json.loads(event[6:]) == {"v": json.loads(json.dumps(value)), "3": "int key"}
