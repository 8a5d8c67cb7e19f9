"""``Scheduler``: continuous batching over a paged KV cache with a prefix cache.

Each step: take new requests, ``get_next_batch_to_run`` (a prefill batch under
the chunked-prefill budget, else one decode step of every running request),
``run_batch`` on the TP worker, ``process_batch_result`` (append tokens, finish,
cache, stream). When KV pages run out the radix cache evicts; when that is not
enough a running request is retracted to the waiting queue (its tokens are
kept and recomputed later: nothing is lost). The scheduler sees requests and
page ids only; the model runner owns every host-to-device copy.

Faults are contained per request: an exception while admitting, running or
finishing one request fails that request (its client gets the error, its
pages are freed) and the loop goes on; a batch whose forward raises is re-run
one request at a time so only the request that raises fails (with
``--tp-size`` 1: with several ranks a one-sided fault would desynchronise the
collectives, so it stops the engine). Failures outside any request are
counted by :class:`LoopGuard`.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from sglang.plugin_core.hooks.faults import fail_fast
from sglang.srt.constrained.base_grammar_backend import GrammarError, accept_committed
from sglang.srt.layers.sampler import RequestSampler
from sglang.srt.lora.messages import LoRAUpdateOutput, LoRAUpdateReq
from sglang.srt.managers.grammar_queue import GrammarQueue
from sglang.srt.managers.io_struct import (
    AbortReq,
    BatchTokenIDOut,
    FlushCacheReq,
    ProfileReq,
    SchedulerError,
    SchedulerStats,
    TokenizedGenerateReqInput,
)
from sglang.srt.managers.profiler import RankProfiler
from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
from sglang.srt.managers.schedule_policy import InBatchPrefixes, in_batch_share_min, order_waiting
from sglang.srt.managers.scheduler_faults import FaultContainment, LoopGuard
from sglang.srt.managers.scheduler_kv import KVPages
from sglang.srt.managers.scheduler_output import build_output, check_finished
from sglang.srt.managers.tp_worker import TpModelWorker
from sglang.srt.model_executor.forward_batch_info import ForwardMode, ModelWorkerBatch
from sglang.srt.runtime_context import get_exec, get_schedule
from sglang.srt.sampling.sampling_params import SamplingParams, SamplingParamsError

if TYPE_CHECKING:
    from sglang.srt.server_args import ServerArgs

logger = logging.getLogger(__name__)


class Scheduler(FaultContainment, KVPages):
    def __init__(self, server_args: ServerArgs, gpu_id: int, tp_rank: int, dist_init: str, io: Any = None, dp_rank: int = 0) -> None:
        from sglang.srt.mem_cache.radix_cache import RadixCache
        from sglang.srt.tokenizer import load_tokenizer

        self.server_args = server_args
        self.gpu_id, self.tp_rank, self.dp_rank = gpu_id, tp_rank, dp_rank
        self.io = io  # SchedulerIO (ZMQ + TP broadcast); None for in-process use
        self.tp_worker = TpModelWorker(server_args, gpu_id, tp_rank, dist_init)
        runner = self.tp_worker.model_runner
        self.allocator = runner.allocator
        self.page_size = runner.kv_pool.page_size
        self.context_length = runner.context_length
        self.max_total_tokens = runner.max_total_tokens
        self.tree = None if get_schedule().disable_radix_cache else RadixCache(self.allocator, self.page_size)
        self.tokenizer = load_tokenizer(server_args.model_path, server_args.tokenizer_path, runner.tokenizer_info)
        self.eos_ids = set(self.tokenizer.eos_token_ids)
        self.vocab_size = int(self.tokenizer.vocab_size)
        self.grammars = GrammarQueue(server_args.grammar_backend, self.tokenizer, runner.model_config.vocab_size)
        self.grammars.warm_up()
        self.jump_forward = not server_args.disable_jump_forward
        self.in_batch_share_min = in_batch_share_min()
        self.live: dict[str, Req] = {}  # every admitted, unfinished request
        self.guard = LoopGuard()
        self.waiting: deque[Req] = deque()
        self.running: list[Req] = []
        self.chunked_req: Req | None = None
        self.outbox: list[Any] = []
        self.forward_ct = 0
        self.seed = get_exec().random_seed
        self.profiler = RankProfiler(tp_rank, dp_rank)
        # --disaggregation-mode prefill|decode: the side's queues (sglang.srt.disaggregation.scheduler attaches it)
        self.disagg: Any = None
        self.lora = runner.lora_manager  # None without --enable-lora
        from sglang.srt.speculative.spec_worker import Speculator

        self.stream_interval = get_schedule().stream_interval
        self.spec = Speculator.create(self, check_finished, self.build_output)  # None unless --speculative-algorithm

    # -- requests in -------------------------------------------------------------
    def handle(self, msg: Any) -> None:
        if isinstance(msg, TokenizedGenerateReqInput):
            self.add_request(msg)
        elif isinstance(msg, AbortReq):
            self.abort(msg.rid)
        elif isinstance(msg, FlushCacheReq):
            if self.tree is not None:
                self.tree.reset()
            if self.spec is not None:
                self.spec.flush()
        elif isinstance(msg, ProfileReq):
            self.profiler.handle(msg)
        elif isinstance(msg, LoRAUpdateReq):
            self.update_lora(msg)

    def update_lora(self, msg: LoRAUpdateReq) -> None:
        """Load or unload an adapter (the tokenizer manager's ``/load_lora_adapter`` and ``/unload_lora_adapter``)."""
        if self.lora is None:
            self.outbox.append(LoRAUpdateOutput(msg.req_id, False, "LoRA is not enabled: start the server with --enable-lora", self.dp_rank))
            return
        if msg.unload:
            self.lora.unload(msg.ref.lora_id)
            why = None
        else:
            why = self.lora.load(msg.ref)
        self.outbox.append(LoRAUpdateOutput(msg.req_id, why is None, why, self.dp_rank))

    def add_request(self, msg: TokenizedGenerateReqInput) -> None:
        try:
            params = SamplingParams.from_dict(msg.sampling_params, self.vocab_size)
        except SamplingParamsError as exc:
            self.outbox.append(SchedulerError(msg.rid, str(exc)))
            return
        if not msg.input_ids or not all(isinstance(t, int) and 0 <= t < self.vocab_size for t in msg.input_ids):
            self.outbox.append(SchedulerError(msg.rid, f"input_ids must be a non-empty list of token ids in [0, {self.vocab_size})"))
            return
        if len(msg.input_ids) >= self.context_length or len(msg.input_ids) + 1 > self.max_total_tokens:
            self.outbox.append(SchedulerError(msg.rid, f"the prompt has {len(msg.input_ids)} tokens; this server takes at most "
                                              f"{min(self.context_length, self.max_total_tokens) - 1} (context length {self.context_length})"))
            return
        if msg.lora_id is not None and (self.lora is None or msg.lora_id not in self.lora.refs):
            why = "LoRA is not enabled: start the server with --enable-lora" if self.lora is None else f"LoRA adapter {msg.lora_id} is not loaded"
            self.outbox.append(SchedulerError(msg.rid, why))
            return
        sampler = RequestSampler(params, self.seed, hash(msg.rid) & 0xFFFFFFFF)
        sampler.prompt_tokens = set(msg.input_ids)
        req = Req(msg.rid, list(msg.input_ids), params, sampler, msg.stream, msg.lora_id)
        req.bootstrap = msg.bootstrap
        if params.max_new_tokens == 0 and req.input_lp_from is None:  # nothing to compute; prompt log-probabilities need a prefill
            req.finished_reason = {"type": "length", "length": 0}
            self.outbox.append(self.build_output([req]))
            return
        try:
            parked = self.grammars.park(req)
        except GrammarError as exc:
            self.outbox.append(SchedulerError(msg.rid, str(exc)))
            return
        self.live[req.rid] = req
        if not parked:
            self._enqueue(req)

    def _enqueue(self, req: Req) -> None:
        """A request ready to run: to the waiting queue, or to its disaggregation side's queues."""
        if self.disagg is None or not self.disagg.add(req):
            self.waiting.append(req)

    def _admit_compiled(self) -> None:
        """Constrained requests whose grammar is ready join the waiting queue; a constraint that does not compile fails its request (400)."""
        ready, failed = self.grammars.take_ready()
        for req in ready:
            self._enqueue(req)
        for req, why, status in failed:
            self.live.pop(req.rid, None)
            req.finished_reason = {"type": "abort", "message": why}
            self.outbox.append(SchedulerError(req.rid, why, status))

    def abort(self, rid: str) -> None:
        if self.disagg is not None and self.disagg.abort(rid):
            return
        parked = self.grammars.remove(rid)
        if parked is not None:
            self.live.pop(rid, None)
            parked.finished_reason = {"type": "abort"}
            self.outbox.append(self.build_output([parked]))
        for r in list(self.waiting):
            if r.rid == rid:
                self.waiting.remove(r)
                self.live.pop(r.rid, None)
                self._release(r, cache=False)
                r.finished_reason = {"type": "abort"}
                self.outbox.append(self.build_output([r]))
        for r in [*self.running, *([self.chunked_req] if self.chunked_req else [])]:
            if r.rid == rid:
                r.aborted = True

    # -- scheduling ------------------------------------------------------------------
    def get_next_batch_to_run(self) -> ScheduleBatch | None:
        """A prefill batch when requests wait and budget allows, else a decode step."""
        batch = self._prefill_batch()
        if batch is not None:
            return batch
        return self._decode_batch()

    def _prefill_batch(self) -> ScheduleBatch | None:
        sched = get_schedule()
        budget = sched.chunked_prefill_size if sched.chunked_prefill_size and sched.chunked_prefill_size > 0 else 1 << 60
        cap = sched.max_running_requests or 1 << 30
        cands = ([self.chunked_req] if self.chunked_req else []) + order_waiting(self.waiting, sched.schedule_policy, self.tree)
        reqs, lens = [], []
        adapters = {r.lora_id for r in self.running}  # one batch's distinct adapters must fit the pool
        # a disaggregated prefill server caches a prompt only once its KV has gone to the decode side, so a deferred
        # request would find nothing new next step: no deferral there
        shared = InBatchPrefixes(self.tree, self.in_batch_share_min if self.disagg is None else 0)
        for req in cands:
            if len(self.running) + len(reqs) >= cap or budget <= 0:
                break
            if req is not self.chunked_req and not req.kv_len and shared.should_defer(self._matchable(req), req.lora_id):
                continue  # it shares an uncached prefix with a prompt in this batch: next step it reads that from the cache
            if self.lora is not None and req.lora_id not in adapters:
                if not self.lora.fits(adapters | {req.lora_id}):
                    if req is self.chunked_req:
                        break  # a chunk in progress goes first, or nothing does
                    continue  # it waits until a running adapter's requests finish; later requests may fit
                adapters.add(req.lora_id)
            self._match_prefix(req)
            n = min(req.seq_len - req.kv_len, budget)
            if not self._ensure_pages(req, req.kv_len + n):
                if req is not self.chunked_req:
                    self._release(req, cache=False)
                break
            reqs.append(req)
            lens.append(n)
            budget -= n
            shared.take(req.fill_ids[: req.kv_len + n], req.lora_id)
        if not reqs:
            return None
        for r in reqs:
            if r is not self.chunked_req:
                self.waiting.remove(r)
        self.chunked_req = None
        return ScheduleBatch(ForwardMode.EXTEND, reqs, lens)

    def _decode_batch(self) -> ScheduleBatch | None:
        i = 0
        while i < len(self.running):
            req = self.running[i]
            if self._ensure_pages(req, req.kv_len + 1):
                i += 1
                continue
            victim = self.running[-1]
            if victim is req and len(self.running) == 1:
                req.finished_reason = {"type": "abort", "message": f"the KV cache ({self.max_total_tokens} tokens) is full; raise --max-total-tokens"}
                self.running.remove(req)
                self.live.pop(req.rid, None)
                self._release(req, cache=False)
                self.outbox.append(self.build_output([req]))
                continue
            self._retract(victim)
        if not self.running:
            return None
        batch = ScheduleBatch(ForwardMode.DECODE, list(self.running), [1] * len(self.running))
        return batch if self.spec is None else self.spec.plan(batch)  # a verify batch when some request has drafts

    def _retract(self, req: Req) -> None:
        """Free a running request's pages and queue it again; its tokens are kept."""
        self.running.remove(req)
        self._release(req, cache=True)
        self.waiting.appendleft(req)
        logger.info("retracted request %s (%d tokens) to free KV pages", req.rid, req.seq_len)

    def run_batch(self, batch: ScheduleBatch) -> tuple[list[int | None], list[Any]]:
        """Run one forward of ``batch`` on the TP worker."""
        mask = batch.sample_mask()
        mwb = ModelWorkerBatch(
            batch.mode,
            batch.new_tokens(),
            [r.kv_len for r in batch.reqs],
            [list(r.pages) for r in batch.reqs],
            [r.sampler if m else None for r, m in zip(batch.reqs, mask)],
        )
        if self.lora is not None:
            mwb.lora_ids = [r.lora_id for r in batch.reqs]
        if batch.mode is ForwardMode.EXTEND and any(r.input_lp_from is not None for r in batch.reqs):
            mwb.input_logprob_rows = [r.input_logprob_rows(n) for r, n in zip(batch.reqs, batch.extend_lens)]
            mwb.input_logprob_targets = [r.origin_input_ids[r.kv_len + span[0] + 1 : r.kv_len + span[1] + 1] if span else []
                                         for r, span in zip(batch.reqs, mwb.input_logprob_rows)]
            mwb.input_logprob_top = [r.params.top_logprobs_num for r in batch.reqs]
        mwb.drafts, mwb.draft_probs = batch.drafts, batch.draft_probs
        self.forward_ct += 1
        t0 = time.perf_counter()
        result = self.tp_worker.forward_batch_generation(mwb)
        if self.spec is not None:
            self.spec.timed(batch, time.perf_counter() - t0)  # what verify rows cost here (its draft policy's prices)
        if self.spec is not None and batch.mode is ForwardMode.EXTEND:
            self.spec.after_extend(batch)  # STANDALONE: the draft model prefills the same tokens
        self.profiler.step()
        for r, got in zip(batch.reqs, mwb.input_logprobs):
            r.input_logprobs.extend(got)
        return result

    def process_batch_result(self, batch: ScheduleBatch, result: tuple[list[int | None], list[Any]]) -> None:
        """Append sampled tokens, finish requests, cache prefixes, queue outputs.

        A request whose bookkeeping raises (a stop-string check, a hook) fails alone.
        """
        if batch.mode is ForwardMode.TARGET_VERIFY:
            self.spec.commit(batch, result)  # type: ignore[union-attr, arg-type]
            return
        tokens, infos = result
        done: list[Req] = []
        for req, n, tok, info in zip(batch.reqs, batch.extend_lens, tokens, infos):
            try:
                self._advance(batch, req, n, tok, info)
            except Exception as exc:
                if fail_fast(exc):
                    raise
                self.fail_request(req, exc)
                continue
            done.append(req)
        out = self.build_output(done)
        if out is not None:
            self.outbox.append(out)

    def build_output(self, reqs: list[Req]) -> BatchTokenIDOut | None:
        """The step's output message: the unsent tokens of those of ``reqs`` that are due (``scheduler_output.due``)."""
        return build_output(reqs, self.stream_interval)

    def _advance(self, batch: ScheduleBatch, req: Req, n: int, tok: int | None, info: Any) -> None:
        req.kv_len += n
        if tok is None:  # an unfinished prefill chunk
            self.chunked_req = req
            return
        if req.params.max_new_tokens == 0 and not req.output_ids:  # the prompt only (its log-probabilities)
            req.finished_reason = {"type": "abort"} if req.aborted else {"type": "length", "length": 0}
            self.live.pop(req.rid, None)
            self._release(req, cache=True)
            return
        req.output_ids.append(tok)
        req.pending.append(tok)
        grammar = req.sampler.grammar
        if grammar is not None:
            accept_committed(grammar, tok, req.params.constraint)
        if info is not None:
            req.pending_logprobs.append(info)
        if self.disagg is not None and batch.mode is ForwardMode.EXTEND and self.disagg.after_first_token(req, tok, info):
            return  # its pages and first token go to a decode server
        req.finished_reason = {"type": "abort"} if req.aborted else check_finished(req, tok, self.eos_ids, self.tokenizer, self.context_length)
        jumped = False
        if req.finished_reason is None and grammar is not None:
            if grammar.is_terminated():
                req.finished_reason = {"type": "stop", "matched": tok}  # the grammar is complete: nothing can follow
            elif self.jump_forward and not req.params.logprobs:
                jumped = self._jump_forward(req, grammar)
        if req.finished_reason is not None:
            if req in self.running:
                self.running.remove(req)
            self.live.pop(req.rid, None)
            self._release(req, cache=True)
        elif batch.mode is ForwardMode.EXTEND:
            if self.tree is not None:
                self._cache(req)
            (self.waiting.appendleft if jumped else self.running.append)(req)
        elif jumped:  # its forced tokens are prefilled in one extend step, then it decodes again
            self.running.remove(req)
            self.waiting.appendleft(req)

    def _jump_forward(self, req: Req, grammar: Any) -> bool:
        """Append the tokens ``req``'s grammar forces next without a forward each (unless ``--disable-jump-forward``);
        True when some were appended (their KV is then computed by one extend step)."""
        forced = grammar.try_jump_forward()
        if not forced:
            return False
        for t in forced[: max(0, req.params.max_new_tokens - len(req.output_ids))]:
            if not grammar.accept_token(t):
                break
            req.output_ids.append(t)
            req.pending.append(t)
            req.sampler.observe(t)
            req.finished_reason = check_finished(req, t, self.eos_ids, self.tokenizer, self.context_length)
            if req.finished_reason is not None:
                break
        return True

    def step(self) -> bool:
        """One scheduling iteration, faults contained; False when there was nothing to run."""
        try:
            if self.disagg is not None:
                self.disagg.poll(idle=not (self.waiting or self.running or self.chunked_req))
            if self.grammars.parked:
                self._admit_compiled()
            batch = self.get_next_batch_to_run()
        except Exception as exc:
            self._sweep_orphans(exc)  # requests the lost batch had taken
            self.guard.failed("Scheduler.get_next_batch_to_run", exc)
            return False
        if batch is None:
            self.guard.ok()
            self.grammars.wait()
            return False
        try:
            result = self.run_batch(batch)
        except Exception as exc:
            if fail_fast(exc) or self.server_args.tp_size > 1:
                raise
            self._run_one_by_one(batch, exc)
        else:
            try:
                self.process_batch_result(batch, result)
            except Exception as exc:
                self._sweep_orphans(exc)
                self.guard.failed("Scheduler.process_batch_result", exc)
                return True
        self.guard.ok()
        return True

    def stats(self) -> SchedulerStats:
        used = self.allocator.num_pages - self.allocator.available_pages()
        cached = self.tree.cached_pages if self.tree is not None else 0
        from sglang.srt.plugins.hook_registry import HookRegistry

        lora_used, lora_total = self.lora.stats() if self.lora is not None else (0, 0)
        stats = SchedulerStats(len(self.running), len(self.waiting), used, self.allocator.num_pages, cached, HookRegistry.call_failures(),
                               self.dp_rank, self.disagg.queues() if self.disagg is not None else {}, lora_used, lora_total)
        if self.spec is not None:
            stats.spec_accept_length, stats.spec_accept_rate = self.spec.avg_accept_length or 0.0, self.spec.accept_rate or 0.0
        return stats

    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self.chunked_req or self.grammars.parked or (self.disagg is not None and self.disagg.busy()))

    def event_loop(self) -> None:
        """Serve until a fatal fault: receive, schedule, run, send."""
        assert self.io is not None
        last_stats = 0.0
        while True:
            for msg in self.io.recv(block=not self.has_work()):
                self._handle_safely(msg)
            self.step()
            if self.tp_rank == 0:
                now = time.monotonic()
                if now - last_stats > 0.5:
                    self.outbox.append(self.stats())
                    last_stats = now
                for out in self.outbox:
                    self.io.send(out)
            self.outbox.clear()


def run_scheduler_process(server_args: ServerArgs, port_args: Any, gpu_id: int, tp_rank: int, pipe: Any, dp_rank: int = 0) -> None:
    """Entry of each spawned scheduler-rank process (see :mod:`sglang.srt.managers.scheduler_process`)."""
    from sglang.srt.managers.scheduler_process import run_scheduler_rank

    run_scheduler_rank(server_args, port_args, gpu_id, tp_rank, pipe, dp_rank)
