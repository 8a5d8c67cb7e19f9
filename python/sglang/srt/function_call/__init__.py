"""Tool calling in chat: tools rendered into the prompt, ``tool_choice`` enforced by a grammar, calls parsed from the output."""

from sglang.srt.function_call.constraint import ToolPlan, plan_tools
from sglang.srt.function_call.parser import TOOL_CALL_END, TOOL_CALL_START, ParsedCall, StreamSplitter, parse_tool_calls
from sglang.srt.function_call.tool_prompt import render_tool_messages, template_renders_tools

__all__ = [
    "TOOL_CALL_END",
    "TOOL_CALL_START",
    "ParsedCall",
    "StreamSplitter",
    "ToolPlan",
    "parse_tool_calls",
    "plan_tools",
    "render_tool_messages",
    "template_renders_tools",
]
