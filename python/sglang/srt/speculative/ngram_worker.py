"""NGRAM speculative decoding on the scheduler side: draft, plan the verify batch, commit what it accepts.

Owned by the ``Scheduler`` when ``get_spec().speculative_algorithm == "NGRAM"`` (``NgramSpeculator.create``).
Each decode step: every eligible request asks the shared :class:`NgramStore` for up to ``k`` drafts
(``draft_policy``); when none has any, the ordinary DECODE step runs (nothing extra verified); otherwise one
``TARGET_VERIFY`` forward runs ``[last token + drafts]`` of every request (requests without drafts: one row,
sampled as in decode), and :meth:`commit` appends the emitted tokens one at a time with the finish checks
(EOS, stop strings and tokens, ``max_new_tokens``, the context): the rest of a finished request's tokens
are dropped. Only committed tokens count as computed KV (so only they reach the radix cache); the pages
past the committed sequence, which hold rejected drafts only, go back to the allocator.

Requests that decode without speculation (the rule, in one place: :func:`ineligible`): grammar-constrained
ones (the grammar would have to mask each draft position and roll back).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.runtime_context import get_spec
from sglang.srt.speculative.draft_policy import COMPUTE_KNEE, DraftState, fit_budget
from sglang.srt.speculative.ngram_store import NgramStore

if TYPE_CHECKING:  # the scheduler owns this object and hands it its batches (no import back into managers)
    from sglang.srt.managers.schedule_batch import Req, ScheduleBatch

logger = logging.getLogger("sglang.srt.managers.scheduler")

DECODE_LOG_INTERVAL = 40  # decode steps between two "Decode batch" log lines, upstream's default


def ineligible(req: Req) -> str | None:
    """Why ``req`` decodes without speculation (None: it speculates)."""
    if req.sampler.grammar is not None:
        return "grammar-constrained"
    return None


@dataclass
class ReqSpec:
    """One request's speculative counters (upstream's ``meta_info`` fields) and draft-length state."""

    verify_ct: int = 0
    proposed: int = 0
    accepted: int = 0
    histogram: list[int] = field(default_factory=list)  # [n]: verify steps that accepted n drafts
    state: DraftState = field(default_factory=DraftState)

    def meta(self, completion_tokens: int) -> dict[str, Any]:
        """Upstream's names and their newer aliases."""
        rate = self.accepted / self.proposed if self.proposed else 0.0
        hist = list(self.histogram)
        return {"spec_verify_ct": self.verify_ct, "spec_accept_length": completion_tokens / self.verify_ct if self.verify_ct else 0.0,
                "spec_accept_rate": rate, "spec_accept_token_num": self.accepted, "spec_draft_token_num": self.proposed,
                "spec_num_correct_drafts": self.accepted, "spec_num_proposed_drafts": self.proposed, "spec_accepted_drafts": self.accepted,
                "spec_proposed_drafts": self.proposed, "spec_accept_histogram": hist, "spec_correct_drafts_histogram": hist}


class NgramSpeculator:
    def __init__(self, scheduler: Any, check_finished: Callable[..., Any], build_output: Callable[[list[Any]], Any]) -> None:
        spec = get_spec()
        self.sched = scheduler
        # the scheduler's finish check and output message, handed in: this package does not import managers (layering)
        self.check_finished, self.build_output = check_finished, build_output
        self.store = NgramStore(spec.speculative_ngram_min_match_window_size, spec.speculative_ngram_max_match_window_size,
                                spec.speculative_ngram_max_trie_depth, spec.speculative_ngram_capacity, spec.speculative_ngram_match_type)
        self.reset_stats()
        self.decode_steps = 0
        self.last_log = (time.monotonic(), 0)

    @classmethod
    def create(cls, scheduler: Any, check_finished: Callable[..., Any], build_output: Callable[[list[Any]], Any]) -> NgramSpeculator | None:
        """The speculator ``--speculative-algorithm`` asks for (None: off)."""
        algo = get_spec().speculative_algorithm
        if algo is None:
            return None
        if algo != "NGRAM":  # check_server_args refuses the others first; this guards in-process builders
            raise ValueError(f"--speculative-algorithm {algo} is not implemented; use NGRAM")
        logger.info("speculative decoding: NGRAM, up to %d tokens verified per request and step, off at %d running requests "
                    "(the compute knee)", get_spec().speculative_num_draft_tokens, COMPUTE_KNEE)
        return cls(scheduler, check_finished, build_output)

    def reset_stats(self) -> None:
        """Server-level counters (``avg_spec_accept_length``): reset by ``/flush_cache``."""
        self.steps = self.tokens = self.proposed = self.accepted = 0

    def flush(self) -> None:
        self.reset_stats()
        self.store.clear()

    @property
    def avg_accept_length(self) -> float | None:
        return self.tokens / self.steps if self.steps else None

    @property
    def accept_rate(self) -> float | None:
        return self.accepted / self.proposed if self.proposed else None

    # -- planning ----------------------------------------------------------------------------
    def _sync(self, req: Req) -> None:
        seq = self.store.seqs.get(req.rid)
        if seq is None:
            self.store.add(req.rid, req.fill_ids)
        elif len(seq) < req.seq_len:  # tokens committed outside a verify (decode, jump-forward)
            n0 = len(req.origin_input_ids)
            self.store.extend(req.rid, req.output_ids[len(seq) - n0 :] if len(seq) >= n0 else req.fill_ids[len(seq) :])

    def plan(self, batch: ScheduleBatch) -> ScheduleBatch:
        """The decode ``batch`` as a verify batch when some request has drafts; else ``batch`` itself."""
        self.decode_steps += 1
        if self.decode_steps % DECODE_LOG_INTERVAL == 0:
            self._log(len(batch.reqs))
        reqs = batch.reqs
        k_max = max(0, get_spec().speculative_num_draft_tokens - 1)
        wants = [0] * len(reqs)
        if k_max and len(reqs) < COMPUTE_KNEE:
            for i, r in enumerate(reqs):
                if r.spec is None:
                    r.spec = ReqSpec()
                if ineligible(r) is None:
                    room = min(r.params.max_new_tokens - len(r.output_ids), self.sched.context_length - r.seq_len) - 1
                    wants[i] = min(r.spec.state.want(k_max), max(0, room))
        ks = fit_budget(wants, len(reqs))
        drafts: list[list[int]] = []
        for r, k in zip(reqs, ks):
            d: list[int] = []
            if k:
                self._sync(r)
                d = self.store.draft(r.rid, k)
                if d and not self.sched._ensure_pages(r, r.kv_len + 1 + len(d)):
                    d = []  # no KV pages for the drafts: this request decodes plainly this step
            drafts.append(d)
        for r, d in zip(reqs, drafts):
            if r.spec is None:
                r.spec = ReqSpec()
            r.spec.verify_ct += 1
            self.steps += 1
            if not d:
                self.tokens += 1  # a plain row emits one token
                r.spec.histogram[:1] = [(r.spec.histogram or [0])[0] + 1]
        if not any(drafts):
            return batch
        return type(batch)(ForwardMode.TARGET_VERIFY, list(reqs), [1 + len(d) for d in drafts], drafts)

    # -- committing -----------------------------------------------------------------------------
    def commit(self, batch: ScheduleBatch, result: tuple[list[list[int]], list[list[Any]]]) -> None:
        """Append each request's emitted tokens (finish checks per token), free rejected drafts' pages."""
        from sglang.plugin_core.hooks.faults import fail_fast

        s = self.sched
        plain = type(batch)(ForwardMode.DECODE, [], [])
        done: list[Req] = []
        for req, d, toks, infos in zip(batch.reqs, batch.drafts, *result):
            try:
                if d:
                    self._commit_one(req, d, toks, infos)
                else:
                    s._advance(plain, req, 1, toks[0], infos[0])
            except Exception as exc:
                if fail_fast(exc):
                    raise
                s.fail_request(req, exc)
                continue
            done.append(req)
        out = self.build_output(done)
        if out is not None:
            s.outbox.append(out)

    def _commit_one(self, req: Req, drafts: list[int], toks: list[int], infos: list[Any]) -> None:
        s = self.sched
        n = 0
        for t, info in zip(toks, infos):
            req.output_ids.append(t)
            req.pending.append(t)
            req.sampler.observe(t)
            if info is not None:
                req.pending_logprobs.append(info)
            n += 1
            req.finished_reason = {"type": "abort"} if req.aborted else self.check_finished(req, t, s.eos_ids, s.tokenizer, s.context_length)
            if req.finished_reason is not None:
                break  # the rest of the emitted tokens are dropped
        accepted = min(n, len(toks) - 1)  # drafts among the committed tokens (the last emitted one is the target's)
        req.kv_len += n  # the last token and the committed drafts before the newest token have valid KV
        sp = req.spec
        sp.proposed += len(drafts)
        sp.accepted += accepted
        sp.state.update(len(drafts), len(toks) - 1)
        sp.histogram.extend([0] * (accepted + 1 - len(sp.histogram)))
        sp.histogram[accepted] += 1
        self.tokens += n
        self.proposed += len(drafts)
        self.accepted += accepted
        keep = -(-req.seq_len // s.page_size)  # pages past the committed sequence hold rejected drafts only
        if len(req.pages) > keep:
            s.allocator.free(req.pages[keep:])
            del req.pages[keep:]
        self._sync(req)
        if req.finished_reason is not None:
            self.store.finish(req.rid)
            if req in s.running:
                s.running.remove(req)
            s.live.pop(req.rid, None)
            s._release(req, cache=True)

    def forget(self, rids: set[str]) -> None:
        """Drop the store handles of requests that ended outside a verify (aborts, plain decode)."""
        for rid in [r for r in self.store.seqs if r not in rids]:
            self.store.finish(rid)

    def _log(self, running: int) -> None:
        now = time.monotonic()
        t0, tok0 = self.last_log
        self.last_log = (now, self.tokens)
        logger.info("Decode batch. #running-req: %d, accept len: %.2f, accept rate: %.2f, gen throughput (token/s): %.2f",
                    running, self.avg_accept_length or 0.0, self.accept_rate or 0.0, (self.tokens - tok0) / max(now - t0, 1e-6))
        self.forget(set(self.sched.live))
