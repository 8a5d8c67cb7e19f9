"""OpenAI-compatible completions and chat completions over the engine.

Tokenization (chat template included) runs in a worker thread, so a large
prompt never stalls the event loop (``/health`` keeps answering). A stream
that fails after it started ends with an error event and ``data: [DONE]``.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from sglang.plugin_core.hooks.faults import describe_fault, hook_of
from sglang.srt.entrypoints.openai.logprobs import chat_logprobs, completion_logprobs
from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest, CompletionRequest, _Sampling
from sglang.srt.function_call import (
    ParsedCall,
    StreamSplitter,
    ToolPlan,
    parse_tool_calls,
    plan_tools,
    render_tool_messages,
    template_renders_tools,
)
from sglang.srt.function_call.parser import parse_forced_calls
from sglang.srt.managers.request_errors import EngineDeadError, RequestError, check_text
from sglang.utils.http_common import error_body, sse_data

logger = logging.getLogger(__name__)

DEFAULT_MAX_TOKENS = 512


class ModelNotFound(LookupError):
    pass


def finish_reason(reason: dict[str, Any] | None) -> str | None:
    if reason is None:
        return None
    return "length" if reason.get("type") == "length" else "stop"


def error_event(exc: BaseException) -> str:
    """The SSE event that ends a failed stream (then ``data: [DONE]``), as upstream SGLang sends it."""
    status = 400 if isinstance(exc, RequestError) else 503 if isinstance(exc, EngineDeadError) else 500
    return sse_data(error_body(status, describe_fault(exc) if hook_of(exc) else str(exc)))


def sampling_params(req: _Sampling, prompt_len: int, context: int, logprobs: int = 0) -> dict[str, Any]:
    max_tokens = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    if max_tokens is None:
        max_tokens = max(0, min(DEFAULT_MAX_TOKENS, context - prompt_len))
    sp: dict[str, Any] = {"max_new_tokens": max_tokens}
    for src, dst in (("temperature", "temperature"), ("top_p", "top_p"), ("top_k", "top_k"), ("min_p", "min_p"), ("seed", "seed"),
                     ("frequency_penalty", "frequency_penalty"), ("presence_penalty", "presence_penalty"),
                     ("repetition_penalty", "repetition_penalty"), ("ignore_eos", "ignore_eos"), ("stop_token_ids", "stop_token_ids"),
                     ("logit_bias", "logit_bias"), ("skip_special_tokens", "skip_special_tokens")):
        v = getattr(req, src)
        if v is not None:
            sp[dst] = v
    if req.stop is not None:
        sp["stop"] = [req.stop] if isinstance(req.stop, str) else list(req.stop)
    for name, text in req.constraints().items():
        sp["json_schema" if name == "response_format" else name] = text
    if logprobs:
        sp["logprobs"] = True
        sp["top_logprobs_num"] = max(0, logprobs - 1) if logprobs > 0 else 0
    return sp


def _bootstrap(req: _Sampling, i: int) -> dict[str, Any] | None:
    """The bootstrap fields of the ``i``-th request a body opens (prompt-major, as the choices)."""
    try:
        return req.bootstrap_for(i)
    except ValueError as exc:
        raise RequestError(str(exc), "bootstrap_room") from None


class OpenAIServing:
    """Handlers for ``/v1/completions`` and ``/v1/chat/completions``."""

    def __init__(self, engine: Any, served_model_name: str) -> None:
        self.engine = engine
        self.model = served_model_name
        self.tok = engine.tokenizer_manager.tokenizer
        self.context = min(int(engine.info["context_length"]), int(engine.info["max_total_tokens"]))

    def check_model(self, name: str | None) -> None:
        if name is not None and name != self.model and name != "default":
            raise ModelNotFound(f"The model '{name}' does not exist; this server serves '{self.model}' (see GET /v1/models)")

    def adapter_of(self, req: _Sampling) -> str | None:
        """The LoRA adapter a request selects: ``model="base:adapter"`` (split on the first colon after the served
        name), else its ``lora_path``; None for the base model. The base part must be the served model."""
        from sglang.srt.lora.tokenizer_side import split_model

        base, adapter = split_model(req.model, self.model)
        self.check_model(base)
        return adapter if adapter is not None else req.lora_path

    # -- requests -----------------------------------------------------------------------
    def _chat_ids(self, req: ChatCompletionRequest, plan: ToolPlan | None) -> list[int]:
        messages = []
        for m in req.messages:
            content = m.content
            if isinstance(content, list):  # text parts only (the schema admits no other)
                content = "".join(p.text for p in content)
            msg: dict[str, Any] = {"role": m.role, "content": content or ""}
            if m.tool_calls is not None:
                msg["tool_calls"] = [c.model_dump() for c in m.tool_calls]
            if m.tool_call_id is not None:
                msg["tool_call_id"] = m.tool_call_id
            messages.append(msg)
        tools = plan.tools if plan is not None else None
        if not template_renders_tools(self.tok.chat_template):  # the documented fallback (function_call.tool_prompt)
            messages, tools = render_tool_messages(messages, tools), None
        from jinja2 import TemplateError

        try:
            text = self.tok.apply_chat_template(messages, add_generation_prompt=True, tools=tools)
        except (ValueError, TemplateError) as exc:  # the model's template refused these messages (e.g. a sandbox limit)
            raise RequestError(f"the chat template cannot render these messages: {exc}", "messages") from None
        check_text(text, "messages")
        return self.tok.encode(text, add_special_tokens=False)

    def _prompt_ids(self, req: CompletionRequest) -> list[list[int]]:
        """Token ids of each prompt (one, or a batch)."""
        p = req.prompt
        if isinstance(p, str) or (p and isinstance(p[0], int)):
            p = [p]  # type: ignore[list-item]
        out = []
        for one in p:
            if isinstance(one, list):
                out.append(list(one))
                continue
            if not one:
                raise RequestError("prompt must be a non-empty string or a list of token ids", "prompt")
            check_text(one, "prompt")
            out.append(self.tok.encode(one))
        return out

    async def _open(self, prompts: list[list[int]], req: _Sampling, logprobs: int, prompt_logprobs: bool = False,
                    extra: dict[str, Any] | None = None) -> list[Any]:
        """``req.n`` requests per prompt, prompt-major (choice index = prompt index * n + sample index)."""
        states: list[Any] = []
        try:
            adapter = self.adapter_of(req)
            for ids in prompts:
                sp = {**sampling_params(req, len(ids), self.context, logprobs), **(extra or {})}
                if prompt_logprobs:
                    sp["logprob_start_len"] = 0
                for i in range(req.n):
                    p = dict(sp)
                    if req.seed is not None and req.n > 1:
                        p["seed"] = (req.seed + i + 2**63) % 2**64 - 2**63  # stays an int64
                    states.append(await self.engine.aopen_request(input_ids=ids, sampling_params=p, bootstrap=_bootstrap(req, len(states)),
                                                                  lora_path=adapter, stream=bool(req.stream)))
        except BaseException:
            for st in states:  # a later choice was refused: the earlier ones must not run on
                self.engine.tokenizer_manager.abort(st.rid)
            raise
        return states

    @staticmethod
    def _usage(states: list[Any], n: int = 1) -> dict[str, int]:
        prompt = sum(st.prompt_tokens for st in states[::n])  # each prompt once, however many samples it has
        completion = sum(len(s.output_ids) for s in states)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    def _token_str(self, t: int) -> str:
        return self.tok.decode([t], skip_special_tokens=False)

    async def _run(self, prompts: list[list[int]], req: _Sampling, logprobs: int, obj: str,
                   prompt_logprobs: bool = False, plan: ToolPlan | None = None) -> tuple[list[Any], str, int, AsyncIterator[str] | None]:
        """Open ``req.n`` requests per prompt; either a stream of SSE lines, or the finished states."""
        extra = {"json_schema": plan.json_schema} if plan is not None and plan.json_schema else None
        states = await self._open(prompts, req, logprobs, prompt_logprobs, extra)
        rid, created = f"{'chatcmpl' if obj.startswith('chat') else 'cmpl'}-{uuid.uuid4().hex}", int(time.time())
        if req.stream:
            return states, rid, created, self._stream(states, rid, created, obj, req, plan, prompts)
        try:
            for st in states:
                await self.engine.wait_request(st)
        finally:  # cancelled (the client went away) or failed: no choice keeps running
            for st in states:
                if st.finished is None and st.error is None:
                    self.engine.tokenizer_manager.abort(st.rid)
        return states, rid, created, None

    async def completion(self, req: CompletionRequest) -> dict[str, Any] | AsyncIterator[str]:
        self.adapter_of(req)  # an unknown model is a 404 before any work
        prompts = await asyncio.to_thread(self._prompt_ids, req)
        logprobs = (req.logprobs or 0) + 1 if req.logprobs is not None else 0
        echo_logprobs = req.echo and req.logprobs is not None  # the prompt's log-probabilities too (lm-eval's log-likelihood)
        states, rid, created, stream = await self._run(prompts, req, logprobs, "text_completion", echo_logprobs)
        if stream is not None:
            return stream
        choices = []
        for i, st in enumerate(states):
            ids = prompts[i // req.n]
            lp = self._completion_logprobs(st, ids, req.echo) if req.logprobs is not None else None
            text = (self.tok.decode(ids) if req.echo else "") + st.text
            choices.append({"index": i, "text": text, "logprobs": lp, "finish_reason": finish_reason(st.finished)})
        return {"id": rid, "object": "text_completion", "created": created, "model": self.model, "choices": choices,
                "usage": self._usage(states, req.n)}

    def _completion_logprobs(self, st: Any, ids: list[int], echo: bool) -> dict[str, Any]:
        """The legacy completions ``logprobs`` object; with ``echo`` the prompt's tokens lead, the first with ``null``."""
        return completion_logprobs(self._token_str, st.output_ids, st.logprobs, 0, (ids, st.input_logprobs or []) if echo else None)[0]

    @staticmethod
    def _tool_result(plan: ToolPlan, text: str) -> tuple[str, list[ParsedCall]]:
        """``(content, calls)`` of one choice's output under ``plan``; no calls when the output holds none
        (or, under a forcing grammar, was cut short by ``max_tokens``)."""
        if plan.json_schema is not None:
            calls = parse_forced_calls(text, set(plan.names), plan.named)
            return ("", calls) if calls else (text, [])
        return parse_tool_calls(text, set(plan.names))

    async def chat(self, req: ChatCompletionRequest) -> dict[str, Any] | AsyncIterator[str]:
        self.adapter_of(req)  # an unknown model is a 404 before any work
        choice = req.tool_choice.model_dump() if req.tool_choice is not None and not isinstance(req.tool_choice, str) else req.tool_choice
        plan = plan_tools([t.model_dump(exclude_none=True) for t in req.tools] if req.tools else None, choice, req.parallel_tool_calls)
        ids = await asyncio.to_thread(self._chat_ids, req, plan)
        logprobs = (req.top_logprobs or 0) + 1 if req.logprobs else 0
        states, rid, created, stream = await self._run([ids], req, logprobs, "chat.completion.chunk", plan=plan)
        if stream is not None:
            return stream
        choices = []
        for i, st in enumerate(states):
            lp = None
            if req.logprobs:
                lp = chat_logprobs(self._token_str, st.output_ids, st.logprobs)
            message: dict[str, Any] = {"role": "assistant", "content": st.text}
            reason = finish_reason(st.finished)
            if plan is not None and plan.parses:
                content, calls = self._tool_result(plan, st.text)
                if calls:
                    message = {"role": "assistant", "content": content.strip() or None, "tool_calls": [c.to_openai() for c in calls]}
                    reason = "tool_calls"
            choices.append({"index": i, "message": message, "logprobs": lp, "finish_reason": reason})
        return {"id": rid, "object": "chat.completion", "created": created, "model": self.model, "choices": choices, "usage": self._usage(states)}

    async def _stream(self, states: list[Any], rid: str, created: int, obj: str, req: _Sampling,
                      plan: ToolPlan | None = None, prompts: list[list[int]] | None = None) -> AsyncIterator[str]:
        chat = obj == "chat.completion.chunk"
        tools = plan is not None and plan.parses
        # what upstream streams beside the text: each chunk's tokens' log-probabilities, and (completions) the echoed
        # prompt at the head of a choice's first chunk, its log-probabilities leading that chunk's
        want_lp = bool(req.logprobs) if chat else req.logprobs is not None
        echo = not chat and bool(getattr(req, "echo", False)) and prompts is not None

        def chunk(i: int, text: str | None, reason: str | None, first: bool = False, calls: list[ParsedCall] | None = None,
                  lp: dict[str, Any] | None = None) -> str:
            if chat:
                delta: dict[str, Any] = {"role": "assistant", "content": text or ""} if first else ({"content": text} if text else {})
                if calls:
                    delta["tool_calls"] = [c.to_openai(index=k) for k, c in enumerate(calls)]
                choice: dict[str, Any] = {"index": i, "delta": delta, "logprobs": lp, "finish_reason": reason}
            else:
                choice = {"index": i, "text": text or "", "logprobs": lp, "finish_reason": reason}
            return sse_data({"id": rid, "object": obj, "created": created, "model": self.model, "choices": [choice]})

        try:
            for i, st in enumerate(states):
                first, sent, n_sent, offset = True, "", 0, 0
                pids = prompts[i // req.n] if echo and prompts is not None else None  # the echoed prompt
                # what of each delta may go out now: all of it, what cannot open a <tool_call> block, or (a forced call) nothing
                release = (lambda d: d) if not tools else StreamSplitter().feed if plan.json_schema is None else (lambda d: "")  # type: ignore[union-attr]
                async for c in self.engine.stream_chunks(st):  # new text and ids only: linear in a long stream
                    reason = finish_reason(c["finished"])  # the chunk's own: st.finished may be ahead of it
                    text = release(c["text"])
                    calls: list[ParsedCall] = []
                    if tools and reason is not None:  # the output is complete: send what was held, as content or calls
                        content, calls = self._tool_result(plan, st.text)  # type: ignore[arg-type]
                        text += content[len(sent) + len(text):] if content.startswith(sent + text) else ""
                        reason = "tool_calls" if calls else reason
                    sent += text
                    if text or first or reason:
                        ids, lp = st.output_ids[n_sent:c["n_out"]], None
                        if want_lp and chat:
                            lp = chat_logprobs(self._token_str, ids, st.logprobs[n_sent:n_sent + len(ids)])
                        elif want_lp:
                            lead = (pids, st.input_logprobs or []) if first and pids is not None else None
                            lp, offset = completion_logprobs(self._token_str, ids, st.logprobs[n_sent:n_sent + len(ids)], offset, lead)
                        n_sent += len(ids)
                        if first and pids is not None:
                            text = self.tok.decode(pids) + (text or "")
                        yield chunk(i, text, reason, first, calls, lp)
                        first = False
        except Exception as exc:  # the engine failed this request (or died): tell the client, then end the stream
            logger.warning("stream %s failed: %s", rid, exc)
            self.engine.tokenizer_manager.metrics.count_error("/v1/chat/completions" if chat else "/v1/completions", "engine")
            yield error_event(exc)
            yield "data: [DONE]\n\n"
            return
        finally:  # a client that went away frees every choice's KV pages
            for st in states:
                if st.finished is None and st.error is None:
                    self.engine.tokenizer_manager.abort(st.rid)
        if req.stream_options is not None and req.stream_options.include_usage:
            yield sse_data({"id": rid, "object": obj, "created": created, "model": self.model, "choices": [],
                           "usage": self._usage(states, req.n)})
        yield "data: [DONE]\n\n"
