"""Tools in the prompt: the model's own chat template when it has a tools section, else a documented fallback.

The fallback is the Hermes / Qwen2.5 tool prompt (a system block listing the functions as JSON inside
``<tools></tools>`` and asking for ``<tool_call>`` blocks); earlier calls in the history are rendered in that
format and tool results as ``<tool_response>`` blocks in a user turn, so any ChatML-like template can show them.
"""

from __future__ import annotations

import json
from typing import Any

from sglang.srt.function_call.parser import TOOL_CALL_END, TOOL_CALL_START

FALLBACK_HEADER = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
)
FALLBACK_FOOTER = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    f"{TOOL_CALL_START}{TOOL_CALL_END} XML tags:\n{TOOL_CALL_START}\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n' + TOOL_CALL_END
)


def template_renders_tools(template: str | None) -> bool:
    """Whether a chat template reads the ``tools`` variable (then it renders them itself)."""
    return bool(template) and "tools" in template  # type: ignore[operator]


def tool_block(tools: list[dict[str, Any]]) -> str:
    return FALLBACK_HEADER + "\n".join(json.dumps(t, ensure_ascii=False) for t in tools) + FALLBACK_FOOTER


def _call_text(call: dict[str, Any]) -> str:
    fn = call.get("function", {})
    try:
        args: Any = json.loads(fn.get("arguments") or "{}")
    except ValueError:
        args = fn.get("arguments")
    return f"{TOOL_CALL_START}\n{json.dumps({'name': fn.get('name'), 'arguments': args}, ensure_ascii=False)}\n{TOOL_CALL_END}"


def render_tool_messages(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """``messages`` (OpenAI dicts) as plain ``{"role", "content"}`` turns for a template without tool support:
    the tool block joins the system message (or opens the chat), calls and results become text."""
    out: list[dict[str, Any]] = []
    for m in messages:
        content = m.get("content") or ""
        if m["role"] == "assistant" and m.get("tool_calls"):
            content = "\n".join([content, *(_call_text(c) for c in m["tool_calls"])]).strip()
            out.append({"role": "assistant", "content": content})
        elif m["role"] == "tool":
            out.append({"role": "user", "content": f"<tool_response>\n{content}\n</tool_response>"})
        else:
            out.append({"role": m["role"], "content": content})
    if tools:
        block = tool_block(tools)
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": f"{out[0]['content']}\n\n{block}"}
        else:
            out.insert(0, {"role": "system", "content": block})
    return out
