"""Tool calls in model output: the Hermes / Qwen2.5 format, ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``.

This is the format the fallback tool prompt (``tool_prompt``) teaches a model whose chat template has no
tools section; upstream SGLang parses it with its ``hermes`` / ``qwen25`` detectors.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field

TOOL_CALL_START = "<tool_call>"
TOOL_CALL_END = "</tool_call>"


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


@dataclass
class ParsedCall:
    name: str
    arguments: str  # a JSON object, serialised (OpenAI's ``function.arguments``)
    id: str = field(default_factory=new_call_id)

    def to_openai(self, index: int | None = None) -> dict[str, object]:
        out: dict[str, object] = {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}
        if index is not None:
            out["index"] = index
        return out


def _call(obj: object, names: set[str], args_key: str = "arguments") -> ParsedCall | None:
    if not isinstance(obj, dict) or obj.get("name") not in names:
        return None
    args = obj.get(args_key, obj.get("parameters", {}))
    if not isinstance(args, dict):
        return None
    return ParsedCall(str(obj["name"]), json.dumps(args, ensure_ascii=False))


def parse_tool_calls(text: str, names: set[str]) -> tuple[str, list[ParsedCall]]:
    """``(content, calls)``: every well-formed call to a known function, and the rest of the text (the text
    before the first ``<tool_call>`` block, then whatever is not a call). A block that is not a JSON object
    naming a known function stays in the content."""
    start = text.find(TOOL_CALL_START)
    if start < 0:
        return text, []
    content, calls, rest = text[:start], [], text[start:]
    leftover: list[str] = []
    while rest:
        i = rest.find(TOOL_CALL_START)
        if i < 0:
            leftover.append(rest)
            break
        leftover.append(rest[:i])
        j = rest.find(TOOL_CALL_END, i)
        body = rest[i + len(TOOL_CALL_START) : j if j >= 0 else len(rest)]
        try:
            call = _call(json.loads(body), names)
        except ValueError:
            call = None
        if call is None:
            leftover.append(rest[i : j + len(TOOL_CALL_END) if j >= 0 else len(rest)])
        else:
            calls.append(call)
        rest = rest[j + len(TOOL_CALL_END) :] if j >= 0 else ""
    if not calls:
        return text, []
    return content + "".join(leftover), calls  # starts with the text before the first block, exactly (streams rely on it)


def parse_forced_calls(text: str, names: set[str], named: str | None) -> list[ParsedCall] | None:
    """Calls from output a tool grammar forced: a JSON array of ``{"name", "parameters"}`` (``tool_choice``
    ``"required"``, upstream's shape), or the arguments object of the ``named`` function. ``None`` when the
    output is cut short (``max_tokens``) and so is no complete JSON."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if named is not None:
        return [ParsedCall(named, json.dumps(data, ensure_ascii=False))] if isinstance(data, dict) else None
    calls = [_call(item, names, "parameters") for item in data] if isinstance(data, list) else []
    return [c for c in calls if c is not None] or None


class StreamSplitter:
    """Streams content while holding back what may be the start of a ``<tool_call>`` block.

    ``feed`` returns the text that is safe to send as ``delta.content`` now; once a block starts,
    everything after it is held for :func:`parse_tool_calls` at the end.
    """

    def __init__(self) -> None:
        self.held = ""
        self.in_call = False

    def feed(self, text: str) -> str:
        self.held += text
        if self.in_call:
            return ""
        i = self.held.find(TOOL_CALL_START)
        if i >= 0:
            out, self.held, self.in_call = self.held[:i], self.held[i:], True
            return out
        keep = next((k for k in range(min(len(TOOL_CALL_START) - 1, len(self.held)), 0, -1)
                     if TOOL_CALL_START.startswith(self.held[-k:])), 0)
        out, self.held = self.held[: len(self.held) - keep], self.held[len(self.held) - keep :]
        return out
