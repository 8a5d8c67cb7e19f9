"""How ``sglang.Engine`` opens requests, waits for them and streams them: upstream's result shape from a
``ReqState``, the sync and async streams, the raw chunk records, and the submit that a cancelled caller cannot
leave running. ``Engine`` inherits it (``RequestStreams``); its callers are the engine's own ``generate`` /
``async_generate`` and the HTTP server (``aopen_request``, ``stream_request``, ``stream_chunks``, ``wait_request``).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from sglang.srt.entrypoints.engine_args import Prompt
from sglang.srt.managers.req_state import ReqState
from sglang.srt.managers.request_errors import EngineDeadError, rid_in_use
from sglang.srt.managers.tokenizer_manager import TokenizerManager


async def _wait_event(event: asyncio.Event, seconds: float) -> None:
    """``event.wait()`` for at most ``seconds``: by ``asyncio.timeout`` where the interpreter has it (3.11+), which
    creates no task per wait (``wait_for`` does, once per streamed token and request)."""
    try:
        if hasattr(asyncio, "timeout"):
            async with asyncio.timeout(seconds):
                await event.wait()
        else:
            await asyncio.wait_for(event.wait(), seconds)
    except asyncio.TimeoutError:
        pass


class _Submission:
    """One ``submit`` on a worker thread whose caller may be cancelled (its HTTP client disconnected) while
    the thread is still tokenizing: the request the thread then sends is aborted, whichever side comes
    second does it, without the event loop (which may be closed by then)."""

    def __init__(self, tm: TokenizerManager, prompt: str | None, sampling_params: dict[str, Any] | None,
                 input_ids: list[int] | None, rid: str | None, bootstrap: dict[str, Any] | None = None,
                 lora_path: str | None = None, stream: bool = False) -> None:
        self.tm, self.args = tm, (prompt, sampling_params, input_ids, stream, rid, bootstrap, lora_path)
        self.lock = threading.Lock()
        self.state: ReqState | None = None
        self.gone = False

    def run(self) -> ReqState:
        st = self.tm.submit(*self.args)
        with self.lock:
            self.state = st
            if self.gone:
                self.tm.abort(st.rid)
        return st

    def abandon(self) -> None:
        with self.lock:
            self.gone = True
            if self.state is not None:
                self.tm.abort(self.state.rid)

class RequestStreams:
    """The request half of ``Engine``: needs only ``self.tokenizer_manager`` (None once shut down)."""

    tokenizer_manager: TokenizerManager | None

    def _tm(self) -> TokenizerManager:
        if self.tokenizer_manager is None:
            raise EngineDeadError("this engine has no tokenizer manager (it is shut down, or it is not node 0)")
        return self.tokenizer_manager
    @staticmethod
    def _result(st: ReqState, chunk: dict[str, Any] | None = None) -> dict[str, Any]:
        """Upstream SGLang's result shape: log-probabilities as ``(logprob, token_id, None)`` tuples
        (``None``: the token's text is not requested), the prompt's first token with a ``None`` logprob.
        ``chunk``: one of ``st.chunks``: the request as it stood when that message arrived (a stream's chunk)."""
        n = len(st.output_ids) if chunk is None else chunk["n_out"]
        last = st.meta if chunk is None else chunk["meta"]
        meta: dict[str, Any] = {
            "id": st.rid,
            "finish_reason": st.finished if chunk is None else chunk["finished"],
            "prompt_tokens": st.prompt_tokens,
            "completion_tokens": n,
            "cached_tokens": last.get("cached_tokens", 0),
            "e2e_latency": round(time.perf_counter() - st.created, 6),
        }
        meta.update(last.get("spec") or {})  # speculative decoding's counters, upstream's names (none when it is off)
        if st.logprobs:
            meta["output_token_logprobs"] = [(lp, tok, None) for (lp, _), tok in zip(st.logprobs[:n], st.output_ids)]
            meta["output_top_logprobs"] = [[(v, t, None) for t, v in top] for _, top in st.logprobs[:n]]
        if st.input_logprobs is not None:
            ids, start = st.input_ids, st.logprob_start_len
            first = [(None, ids[0], None)] if start == 0 else []
            skipped = max(1, start)
            meta["input_token_logprobs"] = first + [(lp, t, None) for (lp, _), t in zip(st.input_logprobs, ids[skipped:])]
            meta["input_top_logprobs"] = ([None] if start == 0 else []) + [[(v, t, None) for t, v in top] for _, top in st.input_logprobs]
        if chunk is None:
            return {"text": st.text, "output_ids": list(st.output_ids), "meta_info": meta}
        return {"text": st.text[: chunk["text_len"]], "output_ids": st.output_ids[:n], "meta_info": meta}

    def _wait(self, st: ReqState) -> dict[str, Any]:
        while st.finished is None and st.error is None:
            st.event.wait(0.5)
            st.event.clear()
        if st.error is not None:
            raise st.error
        return self._result(st)

    def _take(self, st: ReqState, sent: int, raw: bool = False) -> tuple[list[dict[str, Any]], int, bool]:
        """Chunks after ``sent`` (upstream's cumulative results, or ``raw``: the manager's own chunk records), the new
        count, and whether the request is done (raises its error)."""
        out = st.chunks[sent:] if raw else [{**self._result(st, c), "delta": c["text"]} for c in st.chunks[sent:]]
        sent += len(out)
        if st.error is not None:
            raise st.error
        return out, sent, st.finished is not None and sent == len(st.chunks)

    def _abort_if_open(self, st: ReqState) -> None:
        if st.finished is None and st.error is None:
            self._tm().abort(st.rid)  # the consumer stopped early

    def _stream(self, st: ReqState) -> Iterator[dict[str, Any]]:
        sent, done = 0, False
        try:
            while not done:
                st.event.wait(0.5)
                st.event.clear()
                out, sent, done = self._take(st, sent)
                yield from out
        finally:
            self._abort_if_open(st)

    @staticmethod
    def _submit_all(tm: TokenizerManager, reqs: list[Prompt], stream: bool = False) -> list[ReqState]:
        states: list[ReqState] = []
        try:
            for r in reqs:
                states.append(tm.submit(r.text, r.sampling_params, r.input_ids, stream, r.rid, r.bootstrap, r.lora_path))
        except BaseException:
            for st in states:  # a later prompt was refused: the earlier ones must not run on
                tm.abort(st.rid)
            raise
        return states

    def open_request(self, prompt: str | None = None, sampling_params: dict[str, Any] | None = None,
                     input_ids: list[int] | None = None, lora_path: str | None = None, stream: bool = False) -> ReqState:
        """Submit one request from inside a running event loop (tokenizes on the loop's thread). ``stream``: its
        tokens are sent as they come (every ``--stream-interval`` tokens), else on finishing or every ``FORCE_STREAM_INTERVAL``."""
        return self._attach(self._tm().submit(prompt, sampling_params, input_ids, stream, lora_path=lora_path))

    async def aopen_request(self, prompt: str | None = None, sampling_params: dict[str, Any] | None = None,
                            input_ids: list[int] | None = None, rid: str | None = None,
                            bootstrap: dict[str, Any] | None = None, lora_path: str | None = None,
                            stream: bool = False) -> ReqState:
        """``open_request`` with validation and tokenization in a worker thread (the HTTP server's path):
        a large prompt never stalls the event loop. ``rid`` names the request (``/abort_request`` takes it);
        ``bootstrap`` (``host``, ``port``, ``room``) pairs it with a prefill server (``--disaggregation-mode``)."""
        tm = self._tm()
        if rid is not None and rid in tm.states:  # early, before tokenizing; the manager's check under its lock decides
            raise rid_in_use(rid)
        submit = _Submission(tm, prompt, sampling_params, input_ids, rid, bootstrap, lora_path, stream)
        try:
            return self._attach(await asyncio.to_thread(submit.run))
        except asyncio.CancelledError:
            submit.abandon()
            raise

    @staticmethod
    def _attach(st: ReqState) -> ReqState:
        st.loop, st.aevent = asyncio.get_running_loop(), asyncio.Event()
        st.event.set()  # results that arrived before the loop was attached are picked up
        return st

    def stream_request(self, st: ReqState) -> AsyncIterator[dict[str, Any]]:
        """Chunks of an opened request, each upstream's cumulative result (text, ids, log-probabilities so far) with its
        ``delta``; leaving the iteration early aborts the request."""
        return self._astream(st)

    def stream_chunks(self, st: ReqState) -> AsyncIterator[dict[str, Any]]:
        """``stream_request`` without the cumulative results: each of the manager's chunk records as it arrives
        (``text``: the new text, ``token_ids``, ``finished``, ``text_len`` and ``n_out``: the text's and the output
        ids' lengths with it, ``meta``). A chunk costs O(its tokens), so a long stream with log-probabilities stays
        linear; for consumers that read the new part only (the OpenAI streams). Leaving early aborts the request."""
        return self._astream(st, raw=True)

    async def wait_request(self, st: ReqState) -> ReqState:
        """Wait for an opened request to finish (raises its error), building no results on the way; cancelling the
        wait aborts the request."""
        async for _ in self._astream(st, raw=True):
            pass
        return st

    result = _result

    @staticmethod
    async def _await(st: ReqState) -> None:
        assert st.aevent is not None
        if not st.event.is_set():
            await _wait_event(st.aevent, 0.5)  # every message wakes aevent; the timeout only re-checks st.error
        st.aevent.clear()
        st.event.clear()

    async def _astream(self, st: ReqState, raw: bool = False) -> AsyncIterator[dict[str, Any]]:
        sent, done = 0, False
        try:
            while not done:
                await self._await(st)
                out, sent, done = self._take(st, sent, raw)
                for chunk in out:
                    yield chunk
        finally:
            self._abort_if_open(st)
