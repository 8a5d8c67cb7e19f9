"""Tokenizer manager (in the caller's process): tokenize, send, collect streamed text.

A receiver thread drains the detokenizer's socket into per-request states;
sync callers wait on a ``threading.Event``, async callers on an
``asyncio.Event`` woken thread-safely. The HTTP server moves the receiving
onto its event loop (``serve_on_loop``). An engine failure wakes everyone.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import zmq

from sglang.srt.configs.generation_config import request_defaults, with_defaults
from sglang.srt.lora.messages import LoRAUpdateOutput
from sglang.srt.lora.tokenizer_side import LoRAFrontend, LoRAUnavailable, acquire_lora
from sglang.srt.managers.bootstrap_fields import check_bootstrap, fake_bootstrap
from sglang.srt.managers.data_parallel_controller import DataParallelController
from sglang.srt.managers.io_struct import (
    AbortReq,
    BatchStrOut,
    EngineFatal,
    FlushCacheReq,
    ProfileReq,
    SchedulerError,
    SchedulerStats,
    TokenizedGenerateReqInput,
)
from sglang.srt.managers.metrics import EngineMetrics
from sglang.srt.managers.req_state import ReqState
from sglang.srt.managers.request_errors import EngineDeadError, RequestError, RequestFailedError, check_text, rid_in_use
from sglang.srt.managers.tokenizer_loop_recv import LoopReceiver, on_loop
from sglang.srt.sampling.sampling_params import SamplingParams, SamplingParamsError

if TYPE_CHECKING:
    from sglang.srt.server_args import ServerArgs

logger = logging.getLogger(__name__)


MAX_PROMPT_CHARS = 1 << 22
GEN_WINDOW_S = 5.0  # the window of last_gen_throughput  # the HTTP body limit bounds this too; this guards sglang.Engine callers


class TokenizerManager:
    def __init__(self, server_args: ServerArgs, port_args: Any, info: dict[str, Any],
                 loaded: tuple[Any, dict[str, Any]] | None = None) -> None:
        """``loaded``: :func:`load_tokenizer_and_defaults`'s result when the launcher read it already (while the ranks
        started); else it is read here."""
        self.server_args = server_args  # a per-instance boundary: several engines may share a process
        self.tokenizer, self.sampling_defaults = loaded or load_tokenizer_and_defaults(server_args)
        self.context_length = int(info["context_length"])
        self.max_total_tokens = int(info["max_total_tokens"])
        self.ctx = zmq.Context(1)
        replicas = info.get("replicas") or [info]  # rank 0 of each data-parallel replica
        self.send_socks = []
        for r in replicas:
            sock = self.ctx.socket(zmq.PUSH)
            sock.connect(r.get("scheduler_input", port_args.scheduler_input))
            self.send_socks.append(sock)
        self.recv_sock = self.ctx.socket(zmq.PULL)
        self.recv_sock.bind(port_args.tokenizer_input)
        self.states: dict[str, ReqState] = {}
        self.lock = threading.Lock()
        self.send_lock = threading.Lock()
        self.controller = DataParallelController(len(replicas), server_args.load_balance_method, server_args.page_size, self.max_total_tokens)
        self.replica_stats: list[SchedulerStats | None] = [None] * len(replicas)
        self.dead: BaseException | None = None
        self.root_cause: Callable[[float], str | None] | None = None  # the launcher's "which child died", waiting up to N s
        self.metrics = EngineMetrics(lambda: self.replica_stats)
        self.gen_window: deque[tuple[float, int, int]] = deque(maxlen=4096)  # (time, tokens, replica) of recent outputs
        self.profile: ProfileReq | None = None
        self._ids = itertools.count()
        self.lora = create_lora_frontend(self._send, len(replicas))  # None without --enable-lora
        # the disagg bag this engine published just before building this manager, held: several engines may share a process
        self.disagg_mode, self.disagg_fake = _disagg_mode()
        self._stop = threading.Event()
        self._handover = threading.Event()  # the receiver thread ends: serve_on_loop takes the socket
        self._loop_recv: LoopReceiver | None = None
        self.thread = threading.Thread(target=self._recv_loop, daemon=True, name="tokenizer-manager-recv")
        self.thread.start()

    # -- requests ------------------------------------------------------------------
    def tokenize(self, prompt: str | None, input_ids: list[int] | None) -> list[int]:
        """Token ids of the prompt; raises :class:`RequestError` for anything that is not a usable prompt."""
        if input_ids is not None:
            vocab = self.tokenizer.vocab_size
            if not isinstance(input_ids, list) or not input_ids or not all(
                isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab for t in input_ids
            ):
                raise RequestError(f"input_ids must be a non-empty list of token ids in [0, {vocab})", "input_ids")
            return list(input_ids)
        if not isinstance(prompt, str) or not prompt:
            raise RequestError("prompt must be a non-empty string (or pass input_ids)", "prompt")
        if len(prompt) > MAX_PROMPT_CHARS:
            raise RequestError(f"the prompt has {len(prompt)} characters; at most {MAX_PROMPT_CHARS} are accepted", "prompt")
        check_text(prompt, "prompt")
        return self.tokenizer.encode(prompt)

    def submit(self, prompt: str | None = None, sampling_params: dict[str, Any] | None = None, input_ids: list[int] | None = None,
               stream: bool = False, rid: str | None = None, bootstrap: dict[str, Any] | None = None,
               lora_path: str | None = None) -> ReqState:
        """Validate, tokenize and send one request; raises :class:`RequestError` for bad input.

        ``bootstrap`` (``host``, ``port``, ``room``): the prefill server a disaggregated request pairs with.
        ``lora_path``: the name of a loaded LoRA adapter (upstream's field name), None for the base model."""
        if self.dead is not None:
            raise EngineDeadError(str(self.dead)) from self.dead
        problem = check_bootstrap(self.disagg_mode, bootstrap, self.disagg_fake)
        if problem is not None:
            raise RequestError(problem, "bootstrap_room")
        if bootstrap is None and self.disagg_fake:
            bootstrap = fake_bootstrap()  # a fake-backend decode server pairs with no prefill server (upstream's sentinel)
        try:
            # the one place every entry passes: a field the request does not send takes the server's default
            params = SamplingParams.from_dict(with_defaults(sampling_params, self.sampling_defaults), self.tokenizer.vocab_size)
        except SamplingParamsError as exc:
            raise RequestError(str(exc), exc.param) from None
        ids = self.tokenize(prompt, input_ids)
        limit = min(self.context_length, self.max_total_tokens)
        if len(ids) + params.max_new_tokens > limit:
            raise RequestError(
                f"the prompt ({len(ids)} tokens) plus max_new_tokens ({params.max_new_tokens}) exceeds the context of "
                f"{limit} tokens; shorten the prompt or lower max_new_tokens", "max_new_tokens"
            )
        named, rid = rid is not None, rid or f"{uuid.uuid4().hex[:12]}-{next(self._ids)}"
        state = ReqState(rid, len(ids))
        if params.logprobs and params.logprob_start_len >= 0:
            if params.logprob_start_len >= len(ids):
                raise RequestError(f"logprob_start_len {params.logprob_start_len} must be below the prompt length ({len(ids)} tokens)", "logprob_start_len")
            state.input_ids, state.logprob_start_len = ids, params.logprob_start_len
        state.lora_id = self._acquire_lora(lora_path)  # last: only the rid check below refuses after it, and releases it
        with self.lock:  # checked and taken at once: two requests naming one rid cannot both pass
            taken = named and rid in self.states
            if not taken:
                self.states[rid] = state
                dp = state.dp_rank = self.controller.route(rid, ids)
        if taken:
            self._ended(state)
            raise rid_in_use(rid)
        self.metrics.requests.inc()
        self.metrics.prompt_tokens.inc(len(ids))
        self._send(TokenizedGenerateReqInput(rid, ids, params.to_dict(), stream, bootstrap, state.lora_id), dp)
        if self.server_args.log_requests:
            logger.info("request %s: %d prompt tokens, sampling %s", rid, len(ids), params.to_dict())
        return state

    def _acquire_lora(self, name: Any) -> str | None:
        try:
            return acquire_lora(self.lora, name)
        except LoRAUnavailable as exc:
            raise RequestError(str(exc), "lora_path") from None

    def _ended(self, st: ReqState) -> None:
        """A request ended (finished, failed, or the engine died): its adapter is no longer in use."""
        if self.lora is not None and st.lora_id is not None:
            self.lora.release(st.lora_id)
            st.lora_id = None

    def abort(self, rid: str) -> None:
        """Stop an unfinished request (its client went away); counted once however often it is called."""
        with self.lock:
            st = self.states.get(rid)
            if st is None or st.abort_sent:
                return
            st.abort_sent = True
            dp = self.controller.replica_of(rid)
        self.metrics.aborted.inc()
        self._send(AbortReq(rid), dp)

    def _send(self, msg: Any, dp_rank: int | None = None) -> None:
        """To one replica's scheduler, or to every replica (``dp_rank=None``)."""
        with self.send_lock:
            for sock in self.send_socks if dp_rank is None else [self.send_socks[dp_rank]]:
                sock.send_pyobj(msg)

    def hook_failures(self) -> list[dict[str, Any]]:
        """Exceptions hooks raised when called, since start: this process's and each scheduler's (TP rank 0)."""
        from sglang.srt.plugins.hook_registry import HookRegistry

        out = [{**f, "process": "tokenizer"} for f in HookRegistry.call_failures()]
        for dp, st in enumerate(self.replica_stats):
            who = "scheduler" if len(self.replica_stats) == 1 else f"scheduler DP{dp}"
            out += [{**f, "process": who} for f in (st.hook_failures if st else [])]
        return out

    def flush_cache(self) -> None:
        self._send(FlushCacheReq())

    # -- profiling and state --------------------------------------------------------
    def start_profile(self, output_dir: str, num_steps: int | None = None) -> None:
        """Start the torch profiler on every scheduler rank; traces go to ``output_dir``."""
        self.profile = ProfileReq("start", os.path.abspath(output_dir), time.strftime("%Y%m%d-%H%M%S"), num_steps)
        self._send(self.profile)

    def stop_profile(self, timeout: float = 60.0) -> list[str]:
        """Stop profiling and wait for every rank's trace; their paths. RuntimeError when none runs."""
        from sglang.srt.managers.profiler import trace_path

        prof = self.profile
        if prof is None:
            raise RuntimeError("no profile is running: POST /start_profile first")
        self.profile = None
        self._send(ProfileReq("stop"))
        paths = [trace_path(prof.output_dir, prof.stamp, r, dp) for dp in range(len(self.send_socks)) for r in range(self.server_args.tp_size)]
        deadline = time.monotonic() + timeout
        while not all(os.path.exists(p) for p in paths):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the profile traces did not appear in {prof.output_dir} within {timeout:.0f}s; see the server log")
            time.sleep(0.05)
        return paths

    def internal_states(self) -> list[dict[str, Any]]:
        """One entry per data-parallel replica, as upstream's ``/get_server_info`` ``internal_states``."""
        return [self.internal_state(dp) for dp in range(len(self.replica_stats))]

    def internal_state(self, dp_rank: int = 0) -> dict[str, Any]:
        """One replica's load figures; ``routed_requests`` counts the requests the controller sent it."""
        st = self.replica_stats[dp_rank]
        now = time.perf_counter()
        recent = [(t, n) for t, n, dp in self.gen_window if now - t <= GEN_WINDOW_S and dp == dp_rank]
        span = max(now - recent[0][0], 1e-3) if recent else 0.0
        state = {
            "dp_rank": dp_rank,
            "routed_requests": self.controller.routed[dp_rank],
            "last_gen_throughput": round(sum(n for _, n in recent) / span, 3) if recent else 0.0,
            "num_running_reqs": st.num_running if st else 0,
            "num_waiting_reqs": st.num_waiting if st else 0,
            "token_usage": round(st.kv_used_pages / st.kv_total_pages, 4) if st and st.kv_total_pages else 0.0,
            "lora_pool_slots_used": st.lora_slots_used if st else 0,
            "lora_pool_slots_total": st.lora_slots_total if st else 0,
            "max_total_num_tokens": self.max_total_tokens,
            "context_length": self.context_length,
        }
        if st is not None and st.spec_accept_length:  # as upstream: only while speculation is on and has verified a step
            state["avg_spec_accept_length"] = round(st.spec_accept_length, 4)
        return state

    # -- results -------------------------------------------------------------------
    def serve_on_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Read results on ``loop`` from now on instead of the receiver thread (``tokenizer_loop_recv``). Called once,
        on ``loop``'s thread, by the HTTP server at start-up; nothing may block that loop on a result afterwards
        (the server's blocking calls run in worker threads)."""
        if self._loop_recv is not None or self._stop.is_set():
            return
        self._handover.set()
        self.thread.join()  # it polls in steps of 100 ms; after this only the loop touches the socket
        self._loop_recv = LoopReceiver(self.recv_sock, loop, self._handle)
        self._loop_recv.start()

    def _recv_loop(self) -> None:
        poller = zmq.Poller()
        poller.register(self.recv_sock, zmq.POLLIN)
        while not (self._stop.is_set() or self._handover.is_set()):
            try:
                if poller.poll(100):
                    self._handle(self.recv_sock.recv_pyobj())
            except Exception as exc:  # this thread must outlive any one message: every waiting request depends on it
                if self._stop.is_set():
                    return
                logger.exception("tokenizer manager: a message from the engine could not be handled: %s", exc)

    def _handle(self, msg: Any) -> None:
        if isinstance(msg, SchedulerStats):
            if 0 <= msg.dp_rank < len(self.replica_stats):
                self.replica_stats[msg.dp_rank] = msg
        elif isinstance(msg, SchedulerError):
            self._on_error(msg)
        elif isinstance(msg, LoRAUpdateOutput):
            if self.lora is not None:
                self.lora.on_output(msg)
        elif isinstance(msg, EngineFatal):
            if self._loop_recv is not None and on_loop(self._loop_recv.loop):  # it waits for the launcher: not on the loop
                threading.Thread(target=self._on_fatal, args=(msg,), daemon=True, name="tokenizer-manager-fatal").start()
            else:
                self._on_fatal(msg)
        elif isinstance(msg, BatchStrOut):
            self._dispatch(msg)

    def _on_fatal(self, msg: EngineFatal) -> None:
        # a rank that stops because a peer died (a torch.distributed error) reports the symptom: name the process that
        # died first, when the launcher sees one
        dead = self.root_cause(2.0) if self.root_cause is not None else None
        message = f"{dead}; then {msg.message}" if dead else msg.message
        logger.error("the engine stopped: %s", message)
        self.fail_all(EngineDeadError(message))

    def _dispatch(self, msg: BatchStrOut) -> None:
        for rid, text, ids, reason, meta in zip(msg.rids, msg.texts, msg.output_ids, msg.finished_reasons, msg.meta):
            with self.lock:
                st = self.states.get(rid)
                if st is None:
                    continue
                st.add_message(text, ids, reason, meta)
                now = time.perf_counter()
                if ids:
                    self.gen_window.append((now, len(ids), self.controller.replica_of(rid) or 0))
                    self.metrics.generation_tokens.inc(len(ids))
                    (self.metrics.itl if st.last_chunk else self.metrics.ttft).observe(now - (st.last_chunk or st.created))
                    st.last_chunk = now
                if reason is not None:
                    st.finished = reason
                    del self.states[rid]
                    self._ended(st)
                    self.controller.finish(rid)
                    if self.server_args.log_requests:
                        logger.info("finished %s (%s, %d tokens): %r", rid, reason.get("type"), len(st.output_ids), st.text[:500])
            st.wake()

    def _on_error(self, msg: SchedulerError) -> None:
        if msg.status < 500:
            self._finish_with_error(msg.rid, RequestError(msg.message))
            return
        with self.lock:
            dp = self.controller.replica_of(msg.rid)
        self._finish_with_error(msg.rid, RequestFailedError(msg.message))
        if dp is not None:  # a request that failed outside the scheduler may still run there
            self._send(AbortReq(msg.rid), dp)

    def _finish_with_error(self, rid: str, err: BaseException) -> None:
        with self.lock:
            st = self.states.pop(rid, None)
            self.controller.finish(rid)
        if st is not None:
            self._ended(st)
            st.error = err
            st.wake()

    def fail_all(self, err: BaseException) -> None:
        """Wake every waiting request with ``err`` (a child died); the first cause is kept."""
        if self.dead is None:
            self.dead = err
        with self.lock:
            states, self.states = list(self.states.values()), {}
            for st in states:
                self.controller.finish(st.rid)
        for st in states:
            self._ended(st)
            st.error = err
            st.wake()

    def close(self) -> None:
        self._stop.set()
        if self._loop_recv is not None:
            self._loop_recv.stop()
        self.thread.join(timeout=2)
        for sock in self.send_socks:
            sock.close(0)
        self.recv_sock.close(0)
        self.ctx.term()


def _disagg_mode() -> tuple[str, bool]:
    """``--disaggregation-mode``, and whether this is a decode server of the ``fake`` transfer backend, from the
    published ``disagg`` bag (``get_disagg()``)."""
    from sglang.srt.runtime_context import get_disagg

    bag = get_disagg()
    return bag.disaggregation_mode, bag.disaggregation_mode == "decode" and bag.disaggregation_transfer_backend == "fake"


def create_lora_frontend(send: Callable[[Any, int | None], None], replicas: int) -> LoRAFrontend | None:
    """The tokenizer manager's frontend when ``--enable-lora`` resolved on (``get_lora()``), else None."""
    from sglang.srt.runtime_context import get_lora

    cfg = get_lora()
    if not cfg.enable_lora:
        return None
    return LoRAFrontend(list(cfg.lora_paths or []), cfg.max_loras_per_batch, send, replicas)


def load_tokenizer_and_defaults(server_args: ServerArgs) -> tuple[Any, dict[str, Any]]:
    """The tokenizer, and the sampling defaults of requests (a GGUF is read once for both)."""
    from sglang.srt.model_loader.generation import read_model_generation
    from sglang.srt.model_loader.gguf_loader import read_gguf_tokenizer
    from sglang.srt.model_loader.paths import resolve_model_path
    from sglang.srt.tokenizer import load_tokenizer

    path = resolve_model_path(server_args.model_path)
    needed = server_args.tokenizer_path is None or server_args.sampling_defaults == "model"
    gguf_info = read_gguf_tokenizer(path) if path.is_file() and needed else None
    tokenizer = load_tokenizer(server_args.model_path, server_args.tokenizer_path, gguf_info)
    model = read_model_generation(path, gguf_info) if server_args.sampling_defaults == "model" else None
    defaults = request_defaults(model, server_args.preferred_sampling_params)
    if defaults:
        logger.info("sampling defaults of requests (--sampling-defaults %s, --preferred-sampling-params): %s",
                    server_args.sampling_defaults, defaults)
    return tokenizer, defaults
