"""Tokenizer manager (in the caller's process): tokenize, send, collect streamed text.

A receiver thread drains the detokenizer's socket into per-request states;
sync callers wait on a ``threading.Event``, async callers on an
``asyncio.Event`` woken thread-safely. An engine failure wakes everyone.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import zmq

from sglang.srt.managers.io_struct import AbortReq, BatchStrOut, FlushCacheReq, SchedulerError, SchedulerStats, TokenizedGenerateReqInput
from sglang.srt.managers.metrics import ITL_BUCKETS, TTFT_BUCKETS, Histogram
from sglang.srt.sampling.sampling_params import SamplingParams

logger = logging.getLogger(__name__)


class EngineDeadError(RuntimeError):
    """A child process of the engine died; the message names it and its exit code."""


class RequestError(ValueError):
    """The request is invalid (the message names the parameter); the engine keeps serving."""


@dataclass
class ReqState:
    rid: str
    prompt_tokens: int
    chunks: list[dict[str, Any]] = field(default_factory=list)
    text: str = ""
    output_ids: list[int] = field(default_factory=list)
    finished: dict[str, Any] | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    logprobs: list[Any] = field(default_factory=list)
    error: BaseException | None = None
    created: float = field(default_factory=time.perf_counter)
    last_chunk: float = 0.0
    event: threading.Event = field(default_factory=threading.Event)
    loop: asyncio.AbstractEventLoop | None = None
    aevent: asyncio.Event | None = None

    def wake(self) -> None:
        self.event.set()
        if self.loop is not None and self.aevent is not None:
            self.loop.call_soon_threadsafe(self.aevent.set)


class TokenizerManager:
    def __init__(self, server_args: Any, port_args: Any, info: dict[str, Any]) -> None:
        from sglang.srt.tokenizer import load_tokenizer

        self.server_args = server_args  # a per-instance boundary: several engines may share a process
        self.tokenizer = load_tokenizer(server_args.model_path, server_args.tokenizer_path)
        self.context_length = int(info["context_length"])
        self.max_total_tokens = int(info["max_total_tokens"])
        self.ctx = zmq.Context(1)
        self.send_sock = self.ctx.socket(zmq.PUSH)
        self.send_sock.connect(port_args.scheduler_input)
        self.recv_sock = self.ctx.socket(zmq.PULL)
        self.recv_sock.bind(port_args.tokenizer_input)
        self.states: dict[str, ReqState] = {}
        self.lock = threading.Lock()
        self.send_lock = threading.Lock()
        self.stats: SchedulerStats | None = None
        self.dead: BaseException | None = None
        self.counters = {"requests": 0, "prompt_tokens": 0, "generation_tokens": 0, "aborted_requests": 0}
        self.ttft = Histogram("sglang_time_to_first_token_seconds", "Time to first token", TTFT_BUCKETS)
        self.itl = Histogram("sglang_inter_token_latency_seconds", "Time between streamed chunks", ITL_BUCKETS)
        self._ids = itertools.count()
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._recv_loop, daemon=True, name="tokenizer-manager-recv")
        self.thread.start()

    # -- requests ------------------------------------------------------------------
    def tokenize(self, prompt: str | None, input_ids: list[int] | None) -> list[int]:
        if input_ids is not None:
            if not isinstance(input_ids, list) or not input_ids or not all(isinstance(t, int) and 0 <= t < self.tokenizer.vocab_size for t in input_ids):
                raise RequestError(f"input_ids must be a non-empty list of token ids in [0, {self.tokenizer.vocab_size})")
            return list(input_ids)
        if not isinstance(prompt, str) or not prompt:
            raise RequestError("prompt must be a non-empty string (or pass input_ids)")
        return self.tokenizer.encode(prompt)

    def submit(self, prompt: str | None = None, sampling_params: dict[str, Any] | None = None, input_ids: list[int] | None = None,
               stream: bool = False, rid: str | None = None) -> ReqState:
        """Validate, tokenize and send one request; raises :class:`RequestError` for bad input."""
        if self.dead is not None:
            raise EngineDeadError(str(self.dead)) from self.dead
        try:
            params = SamplingParams.from_dict(sampling_params)
        except (ValueError, TypeError) as exc:
            raise RequestError(str(exc)) from None
        ids = self.tokenize(prompt, input_ids)
        limit = min(self.context_length, self.max_total_tokens)
        if len(ids) + params.max_new_tokens > limit:
            raise RequestError(
                f"the prompt ({len(ids)} tokens) plus max_new_tokens ({params.max_new_tokens}) exceeds the context of "
                f"{limit} tokens; shorten the prompt or lower max_new_tokens"
            )
        rid = rid or f"{uuid.uuid4().hex[:12]}-{next(self._ids)}"
        state = ReqState(rid, len(ids))
        with self.lock:
            self.states[rid] = state
            self.counters["requests"] += 1
            self.counters["prompt_tokens"] += len(ids)
        with self.send_lock:
            self.send_sock.send_pyobj(TokenizedGenerateReqInput(rid, ids, params.to_dict(), stream))
        if self.server_args.log_requests:
            logger.info("request %s: %d prompt tokens, sampling %s", rid, len(ids), params.to_dict())
        return state

    def abort(self, rid: str) -> None:
        with self.lock:
            self.counters["aborted_requests"] += 1
        with self.send_lock:
            self.send_sock.send_pyobj(AbortReq(rid))

    def flush_cache(self) -> None:
        with self.send_lock:
            self.send_sock.send_pyobj(FlushCacheReq())

    # -- results -------------------------------------------------------------------
    def _recv_loop(self) -> None:
        poller = zmq.Poller()
        poller.register(self.recv_sock, zmq.POLLIN)
        while not self._stop.is_set():
            if not poller.poll(100):
                continue
            msg = self.recv_sock.recv_pyobj()
            if isinstance(msg, SchedulerStats):
                self.stats = msg
            elif isinstance(msg, SchedulerError):
                self._finish_with_error(msg.rid, RequestError(msg.message))
            elif isinstance(msg, BatchStrOut):
                self._dispatch(msg)

    def _dispatch(self, msg: BatchStrOut) -> None:
        for rid, text, ids, reason, meta in zip(msg.rids, msg.texts, msg.output_ids, msg.finished_reasons, msg.meta):
            with self.lock:
                st = self.states.get(rid)
                if st is None:
                    continue
                st.text += text
                st.output_ids.extend(ids)
                st.logprobs.extend(meta.get("logprobs") or [])
                st.meta = meta
                st.chunks.append({"text": text, "token_ids": list(ids), "finished": reason})
                self.counters["generation_tokens"] += len(ids)
                now = time.perf_counter()
                if ids:
                    (self.itl if st.last_chunk else self.ttft).observe(now - (st.last_chunk or st.created))
                    st.last_chunk = now
                if reason is not None:
                    st.finished = reason
                    del self.states[rid]
                    if self.server_args.log_requests:
                        logger.info("finished %s (%s, %d tokens): %r", rid, reason.get("type"), len(st.output_ids), st.text[:500])
            st.wake()

    def _finish_with_error(self, rid: str, err: BaseException) -> None:
        with self.lock:
            st = self.states.pop(rid, None)
        if st is not None:
            st.error = err
            st.wake()

    def fail_all(self, err: BaseException) -> None:
        """Wake every waiting request with ``err`` (a child died)."""
        self.dead = err
        with self.lock:
            states, self.states = list(self.states.values()), {}
        for st in states:
            st.error = err
            st.wake()

    def close(self) -> None:
        self._stop.set()
        self.thread.join(timeout=2)
        self.send_sock.close(0)
        self.recv_sock.close(0)
        self.ctx.term()
