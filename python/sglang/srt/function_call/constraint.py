"""``tool_choice`` as a plan: whether tools are shown, which grammar enforces a call, how the output is read.

``"required"`` constrains the output to a JSON array of ``{"name", "parameters"}`` objects, one per call, each
``parameters`` under its function's JSON schema (upstream SGLang's shape; one item unless
``parallel_tool_calls`` is true); a named function constrains it to that function's arguments object;
``"auto"`` leaves the output free and parses ``<tool_call>`` blocks; ``"none"`` shows no tools.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

ANY_OBJECT: dict[str, Any] = {"type": "object"}


@dataclass(frozen=True)
class ToolPlan:
    tools: list[dict[str, Any]]  # shown to the model (OpenAI's tool objects); empty for "none"
    names: frozenset[str]
    json_schema: str | None  # the grammar constraint, or None for free output
    named: str | None  # the function a named tool_choice forces

    @property
    def parses(self) -> bool:
        return bool(self.tools)


def plan_tools(tools: list[dict[str, Any]] | None, tool_choice: Any, parallel: bool | None) -> ToolPlan | None:
    """The plan of a chat request, or ``None`` when it has no tools. ``tools`` and ``tool_choice`` are the
    request's (validated: a named choice names one of the tools)."""
    if not tools:
        return None
    names = frozenset(t["function"]["name"] for t in tools)
    choice = tool_choice if tool_choice is not None else "auto"
    if choice == "none":
        return ToolPlan([], names, None, None)
    params = {t["function"]["name"]: t["function"].get("parameters") or ANY_OBJECT for t in tools}
    if isinstance(choice, dict):
        name = choice["function"]["name"]
        return ToolPlan(tools, names, json.dumps(params[name]), name)
    if choice == "required":
        item = {"anyOf": [{"type": "object", "properties": {"name": {"type": "string", "enum": [n]}, "parameters": p},
                           "required": ["name", "parameters"], "additionalProperties": False} for n, p in params.items()]}
        array: dict[str, Any] = {"type": "array", "items": item, "minItems": 1}
        if parallel is not True:  # several calls only when the client asks: a small model may repeat a call until max_tokens
            array["maxItems"] = 1
        return ToolPlan(tools, names, json.dumps(array), None)
    return ToolPlan(tools, names, None, None)
