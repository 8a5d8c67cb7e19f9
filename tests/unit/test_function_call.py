"""Tool calling: the plan a tool_choice makes, the fallback prompt, and parsing calls from whole and streamed output."""

from __future__ import annotations

import json

import jsonschema
import pytest

from sglang.srt.function_call import StreamSplitter, parse_tool_calls, plan_tools, render_tool_messages, template_renders_tools
from sglang.srt.function_call.parser import parse_forced_calls

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time"}}
NAMES = {"get_weather", "get_time"}


def test_required_forces_an_array_of_calls_each_under_its_function_schema():
    plan = plan_tools([WEATHER, TIME], "required", None)
    schema = json.loads(plan.json_schema)
    assert schema["maxItems"] == 1  # one call unless the client allows parallel calls
    jsonschema.validate([{"name": "get_weather", "parameters": {"city": "Oslo"}}], schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate([{"name": "get_weather", "parameters": {}}], schema)  # a required argument is missing
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate([{"name": "launch", "parameters": {}}], schema)
    assert "maxItems" not in json.loads(plan_tools([WEATHER], "required", True).json_schema)


def test_a_named_choice_forces_that_functions_arguments_and_none_hides_the_tools():
    named = plan_tools([WEATHER, TIME], {"type": "function", "function": {"name": "get_weather"}}, None)
    assert json.loads(named.json_schema) == WEATHER["function"]["parameters"] and named.named == "get_weather"
    assert plan_tools([WEATHER], "none", None).tools == [] and not plan_tools([WEATHER], "none", None).parses
    auto = plan_tools([WEATHER], None, None)
    assert auto.json_schema is None and auto.parses
    assert plan_tools(None, "auto", None) is None


def test_forced_output_becomes_calls_and_cut_output_none():
    calls = parse_forced_calls('[{"name": "get_weather", "parameters": {"city": "Oslo"}}]', NAMES, None)
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("get_weather", {"city": "Oslo"})] and calls[0].id.startswith("call_")
    assert parse_forced_calls('{"city": "Rome"}', NAMES, "get_weather")[0].arguments == '{"city": "Rome"}'
    assert parse_forced_calls('[{"name": "get_weather", "parameters": {"ci', NAMES, None) is None


def test_auto_output_with_calls_between_text():
    text = 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>\n' \
           '<tool_call>{"name": "get_time", "arguments": {}}</tool_call> done'
    content, calls = parse_tool_calls(text, NAMES)
    assert [c.name for c in calls] == ["get_weather", "get_time"] and json.loads(calls[0].arguments) == {"city": "Oslo"}
    assert content.startswith("Let me check.\n") and content.strip().endswith("done") and "tool_call" not in content


@pytest.mark.parametrize("text", [
    "no calls here",
    '<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>',  # not one of the tools
    "<tool_call>{not json}</tool_call>",
    '<tool_call>{"name": "get_time", "arguments": "x"}</tool_call>',  # arguments must be an object
])
def test_anything_that_is_not_a_call_to_a_known_function_stays_text(text):
    assert parse_tool_calls(text, NAMES) == (text, [])


def test_the_stream_splitter_holds_back_only_what_may_open_a_call():
    s = StreamSplitter()
    out = [s.feed(d) for d in ["Hello <", "b>world</b> <tool", "_call>{\"name\"", ": \"get_time\", \"arguments\": {}}</tool_call>"]]
    assert out == ["Hello ", "<b>world</b> ", "", ""]
    content, calls = parse_tool_calls("".join(out) + s.held, NAMES)
    assert [c.name for c in calls] == ["get_time"] and content == "Hello <b>world</b> "
    plain = StreamSplitter()
    assert "".join(plain.feed(d) for d in ["a < b", " and <tool"]) + plain.held == "a < b and <tool"


def test_the_fallback_prompt_lists_the_tools_and_renders_the_history_as_text():
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
                                                                 "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
            {"role": "tool", "content": "12 C", "tool_call_id": "call_1"}]
    out = render_tool_messages(msgs, [WEATHER])
    assert [m["role"] for m in out] == ["system", "user", "assistant", "user"]
    assert out[0]["content"].startswith("Be brief.") and json.dumps(WEATHER) in out[0]["content"] and "<tool_call>" in out[0]["content"]
    assert out[2]["content"] == '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    assert out[3]["content"] == "<tool_response>\n12 C\n</tool_response>"
    assert render_tool_messages([{"role": "user", "content": "hi"}], [TIME])[0]["role"] == "system"
    assert template_renders_tools("{% if tools %}{{ tools }}{% endif %}") and not template_renders_tools("{{ messages }}")


def _serving(template: str):
    """The chat handler over a byte-level toy tokenizer with ``template`` (the prompt rendering only: no engine runs)."""
    from types import SimpleNamespace

    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers

    from sglang.srt.entrypoints.openai.serving import OpenAIServing
    from sglang.srt.tokenizer.tokenizer import Tokenizer

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    backend = HFTokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    backend.pre_tokenizer, backend.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    tok = Tokenizer(backend, set(), None, False, template)
    engine = SimpleNamespace(tokenizer_manager=SimpleNamespace(tokenizer=tok), info={"context_length": 4096, "max_total_tokens": 4096})
    return OpenAIServing(engine, "m"), tok


def _prompt(template: str, body: dict) -> str:
    from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest

    serving, tok = _serving(template)
    req = ChatCompletionRequest.model_validate(body)
    tools = [t.model_dump(exclude_none=True) for t in req.tools] if req.tools else None
    return tok.decode(serving._chat_ids(req, plan_tools(tools, req.tool_choice, None)))


HISTORY = {"messages": [{"role": "user", "content": "Weather?"},
                        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function",
                                                                               "function": {"name": "get_weather", "arguments": "{}"}}]},
                        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}], "tools": [WEATHER]}


def test_a_template_with_a_tools_section_renders_the_tools_and_the_history_itself():
    template = ("{% if tools %}TOOLS:{% for t in tools %}{{ t.function.name }};{% endfor %}{% endif %}"
                "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% if m.tool_calls %}[{{ m.tool_calls[0].function.name }}]"
                "{% endif %}{% endfor %}")
    assert _prompt(template, HISTORY) == "TOOLS:get_weather;<user>Weather?<assistant>[get_weather]<tool>sunny"


def test_a_template_without_one_gets_the_fallback_prompt():
    template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
    text = _prompt(template, HISTORY)
    assert text.startswith("<system># Tools") and json.dumps(WEATHER) in text
    assert '<assistant><tool_call>\n{"name": "get_weather", "arguments": {}}\n</tool_call>' in text
    assert text.endswith("<user><tool_response>\nsunny\n</tool_response>")
    assert _prompt(template, {**HISTORY, "tool_choice": "none"}).startswith("<user>Weather?")  # "none": the tools are not shown
