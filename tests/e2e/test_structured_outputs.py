"""Structured outputs on the default model, through the official ``openai`` client and ``/generate``.

Every constrained answer is checked by an independent validator (``json`` + ``jsonschema``,
``re.fullmatch``, Python's own expression parser), greedy and at temperature 1.
"""

from __future__ import annotations

import ast
import concurrent.futures
import json
import re
import urllib.error
import urllib.request

import jsonschema
import openai
import pydantic
import pytest

from helpers.server import ServerProc

pytestmark = [pytest.mark.e2e, pytest.mark.model]

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "role": {"enum": ["student", "teacher", "engineer", "artist"]},
        "address": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                    "required": ["city", "zip"], "additionalProperties": False},
        "skills": {"type": "array", "items": {"type": "string", "maxLength": 16}, "minItems": 1, "maxItems": 3},
    },
    "required": ["name", "age", "role", "address", "skills"],
    "additionalProperties": False,
}
TOPICS = ["a nurse", "a pilot", "my neighbour", "a chess player", "a baker", "a teenager", "a retired judge", "a painter", "a farmer",
          "a physicist", "a poet", "a bus driver", "a cook", "a surfer", "a librarian", "a dentist", "an architect", "a plumber",
          "a student in Paris", "a teacher in Tokyo"]
DATE = r"(19|20)[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
PHONE = r"\([0-9]{3}\) [0-9]{3}-[0-9]{4}"
# arithmetic expressions of 2 to 4 terms: every answer ends, and Python's parser reads it
ARITH = 'root ::= term (" " op " " term){1,3}\nop ::= "+" | "-" | "*"\nterm ::= [1-9] [0-9]{0,2} | "(" term " " op " " term ")"'


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = ServerProc([], tmp_path_factory.mktemp("structured") / "log.txt")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=120)


def chat(client, prompt, temperature, **kw):
    return client.chat.completions.create(model="default", messages=[{"role": "user", "content": prompt}], temperature=temperature,
                                          seed=7, **kw)


def many(fn, items):
    with concurrent.futures.ThreadPoolExecutor(8) as pool:  # concurrent: constrained rows batch together
        return list(pool.map(fn, items))


def generate(server, body, timeout=120):
    req = urllib.request.Request(server.url + "/generate", data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_json_schema_with_nested_objects_enums_and_arrays_holds_on_20_prompts(client, temperature):
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}

    def one(topic):
        r = chat(client, f"Describe {topic} as a JSON record.", temperature, response_format=fmt, max_tokens=200)
        return r.choices[0]

    for topic, choice in zip(TOPICS, many(one, TOPICS)):
        data = json.loads(choice.message.content)
        jsonschema.validate(data, PERSON)
        assert choice.finish_reason == "stop", (topic, choice)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_json_object_mode_gives_a_json_object_on_20_prompts(client, temperature):
    def one(topic):
        # json_object mode constrains the syntax only; the prompt asks for the keys (OpenAI asks for "JSON" in it too)
        return chat(client, f'Answer with a JSON object with the keys "name" and "age": who is {topic}?', temperature,
                    response_format={"type": "json_object"}, max_tokens=256).choices[0]

    for topic, choice in zip(TOPICS, many(one, TOPICS)):
        assert choice.finish_reason == "stop", (topic, choice.message.content)
        assert isinstance(json.loads(choice.message.content), dict)


@pytest.mark.parametrize(("pattern", "prompt"), [(DATE, "The date of the moon landing, as YYYY-MM-DD:"),
                                                 (PHONE, "A US phone number to call:")])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_regex_matches_the_whole_answer(client, pattern, prompt, temperature):
    for seed in range(3):
        r = client.completions.create(model="default", prompt=prompt, temperature=temperature, seed=seed, max_tokens=40,
                                      extra_body={"regex": pattern})
        assert re.fullmatch(pattern, r.choices[0].text), r.choices[0].text
        assert r.choices[0].finish_reason == "stop"


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_an_ebnf_grammar_gives_expressions_that_parse(server, temperature):
    for seed in range(4):
        status, out = generate(server, {"text": "Write a sum for a child to solve:", "sampling_params": {
            "ebnf": ARITH, "max_new_tokens": 64, "temperature": temperature, "seed": seed}})
        assert status == 200, out
        tree = ast.parse(out["text"], mode="eval")  # raises on anything that is not one expression
        assert isinstance(tree.body, ast.BinOp), out["text"]
        assert out["meta_info"]["finish_reason"]["type"] == "stop"


class Book(pydantic.BaseModel):
    title: str = pydantic.Field(max_length=40)
    year: int = pydantic.Field(ge=1000, le=2030)
    genre: str = pydantic.Field(max_length=20)


def test_the_openai_clients_parse_helper_returns_the_pydantic_model(client):
    r = client.beta.chat.completions.parse(model="default", messages=[{"role": "user", "content": "Recommend a classic novel."}],
                                           response_format=Book, temperature=0, max_tokens=120)
    book = r.choices[0].message.parsed
    assert isinstance(book, Book) and book.title


def test_constrained_and_free_requests_in_one_batch_answer_as_when_sent_alone(server):
    bodies = [
        {"text": "The capital of France is", "sampling_params": {"max_new_tokens": 24, "temperature": 0}},
        {"text": "Born on", "sampling_params": {"max_new_tokens": 24, "temperature": 0, "regex": DATE}},
        {"text": "A person as JSON:", "sampling_params": {"max_new_tokens": 120, "temperature": 0, "json_schema": json.dumps(PERSON)}},
        {"text": "Once upon a time", "sampling_params": {"max_new_tokens": 24, "temperature": 0}},
        {"text": "Compute:", "sampling_params": {"max_new_tokens": 40, "temperature": 0, "ebnf": ARITH}},
    ]
    alone = [generate(server, b)[1]["text"] for b in bodies]
    for _ in range(2):
        together = many(lambda b: generate(server, b)[1]["text"], bodies * 2)
        assert together == alone * 2


@pytest.mark.parametrize(("route", "body", "fragment"), [
    ("/v1/chat/completions", {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": 5}}}},
     "the JSON schema does not compile"),
    ("/v1/chat/completions", {"regex": "(ab"}, "the regex does not compile"),
    ("/v1/chat/completions", {"ebnf": "root ::= "}, "the EBNF grammar does not compile"),
    ("/v1/chat/completions", {"regex": "a", "response_format": {"type": "json_object"}}, "at most one constraint"),
    ("/v1/completions", {"regex": "a", "json_schema": "{}"}, "at most one constraint"),
    ("/v1/completions", {"json_schema": "{not json"}, "json_schema is not valid JSON"),
    ("/generate", {"sampling_params": {"regex": "[z-a]"}}, "the regex does not compile"),
])
def test_bad_constraints_get_400_with_the_openai_error_body_and_the_server_lives(server, route, body, fragment):
    base = {"/v1/chat/completions": {"model": "default", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
            "/v1/completions": {"model": "default", "prompt": "hi", "max_tokens": 4}, "/generate": {"text": "hi"}}[route]
    req = urllib.request.Request(server.url + route, data=json.dumps({**base, **body}).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req, timeout=60)
    assert info.value.code == 400
    err = json.loads(info.value.read())["error"]
    assert err["type"] == "invalid_request_error" and fragment in err["message"], err
    assert generate(server, {"text": "hi", "sampling_params": {"max_new_tokens": 2}})[0] == 200


def test_a_server_without_a_grammar_backend_refuses_constraints_with_400(tmp_path):
    s = ServerProc(["--grammar-backend", "none"], tmp_path / "log.txt")
    try:
        status, out = generate(s, {"text": "hi", "sampling_params": {"regex": "[0-9]+", "max_new_tokens": 4}})
        assert status == 400 and "--grammar-backend none" in out["error"]["message"], out
        assert generate(s, {"text": "hi", "sampling_params": {"max_new_tokens": 2}})[0] == 200
    finally:
        s.stop()


WEATHER_PARAMS = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30}, "unit": {"enum": ["celsius", "fahrenheit"]}},
                  "required": ["city", "unit"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city", "parameters": WEATHER_PARAMS}},
         {"type": "function", "function": {"name": "get_time", "description": "Current time in a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30}},
                                                          "required": ["city"], "additionalProperties": False}}}]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
CITIES = ["Paris", "Tokyo", "Lima", "Oslo", "Cairo"]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_tool_choice_required_returns_valid_arguments_for_the_schema(client, temperature):
    def one(city):
        return chat(client, f"What's the weather like in {city}?", temperature, tools=TOOLS, tool_choice="required", max_tokens=120).choices[0]

    for city, choice in zip(CITIES, many(one, CITIES)):
        assert choice.finish_reason == "tool_calls", (city, choice)
        (call,) = choice.message.tool_calls
        assert call.id.startswith("call_") and call.type == "function"
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


def test_a_named_tool_choice_calls_that_function_streamed_in_the_openai_shape(client):
    named = {"type": "function", "function": {"name": "get_time"}}
    whole = chat(client, "What time is it in Lima?", 0.0, tools=TOOLS, tool_choice=named, max_tokens=60).choices[0]
    assert whole.finish_reason == "tool_calls" and whole.message.content is None
    assert whole.message.tool_calls[0].function.name == "get_time"
    jsonschema.validate(json.loads(whole.message.tool_calls[0].function.arguments), SCHEMAS["get_time"])
    deltas, reasons = [], []
    for ev in chat(client, "What time is it in Lima?", 0.0, tools=TOOLS, tool_choice=named, max_tokens=60, stream=True):
        deltas += ev.choices[0].delta.tool_calls or []
        reasons.append(ev.choices[0].finish_reason)
    assert [d.index for d in deltas] == [0] and deltas[0].id.startswith("call_") and deltas[0].type == "function"
    assert (deltas[0].function.name, deltas[0].function.arguments) == ("get_time", whole.message.tool_calls[0].function.arguments)
    assert reasons[-1] == "tool_calls"


def test_a_tool_result_in_the_history_is_answered(client):
    first = chat(client, "What's the weather like in Oslo?", 0.0, tools=TOOLS, tool_choice="required", max_tokens=120).choices[0]
    call = first.message.tool_calls[0]
    history = [{"role": "user", "content": "What's the weather like in Oslo?"},
               {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
               {"role": "tool", "tool_call_id": call.id, "content": '{"temperature": 12, "sky": "cloudy"}'}]
    r = client.chat.completions.create(model="default", messages=history, tools=TOOLS, tool_choice="none", temperature=0, max_tokens=40)
    assert r.choices[0].message.content and not r.choices[0].message.tool_calls


def test_auto_answers_with_text_or_with_calls_to_known_functions(client):
    for city in CITIES[:3]:
        choice = chat(client, f"Call a tool to get the weather in {city}.", 0.0, tools=TOOLS, max_tokens=120).choices[0]
        if choice.message.tool_calls:
            assert choice.finish_reason == "tool_calls"
            for call in choice.message.tool_calls:
                assert call.function.name in SCHEMAS and isinstance(json.loads(call.function.arguments), dict)
        else:
            assert choice.finish_reason in ("stop", "length") and choice.message.content


@pytest.mark.parametrize(("body", "fragment"), [
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "launch"}}}, "tool_choice names the function 'launch'"),
    ({"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}}, "at most one constraint"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": 5}}}], "tool_choice": "required"},
     "the JSON schema does not compile"),
])
def test_bad_tool_requests_get_400(server, body, fragment):
    req = urllib.request.Request(server.url + "/v1/chat/completions", method="POST", headers={"Content-Type": "application/json"},
                                 data=json.dumps({"model": "default", "messages": [{"role": "user", "content": "hi"}], **body}).encode())
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req, timeout=60)
    assert info.value.code == 400 and fragment in json.loads(info.value.read())["error"]["message"]


def test_auto_streams_the_same_answer_it_returns_whole(client):
    kw = {"tools": TOOLS, "max_tokens": 60}
    whole = chat(client, "Say hello to Lima.", 0.0, **kw).choices[0]
    text, calls, reason = "", [], None
    for ev in chat(client, "Say hello to Lima.", 0.0, stream=True, **kw):
        text += ev.choices[0].delta.content or ""
        calls += ev.choices[0].delta.tool_calls or []
        reason = ev.choices[0].finish_reason or reason
    assert reason == whole.finish_reason
    assert [c.function.name for c in calls] == [c.function.name for c in whole.message.tool_calls or []]
    assert text.strip() == (whole.message.content or "").strip()
