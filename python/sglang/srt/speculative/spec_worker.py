"""Speculative decoding on the scheduler side, shared by every algorithm: plan the verify batch, commit what it accepts.

Owned by the ``Scheduler`` (:meth:`Speculator.create` picks the algorithm from ``get_spec()``). Each decode
step: every eligible request asks for up to ``k`` drafts (the algorithm's :meth:`Speculator.propose`: the
n-gram store for NGRAM, the draft model for STANDALONE), cut so that the batch stays under the compute knee
(``draft_policy``); when none has any, the ordinary DECODE step runs (nothing extra verified); otherwise one
``TARGET_VERIFY`` forward runs ``[last token + drafts]`` of every request (requests without drafts: one row,
sampled as in decode), and :meth:`Speculator.commit` appends the emitted tokens one at a time with the finish
checks (EOS, stop strings and tokens, ``max_new_tokens``, the context): the rest of a finished request's
tokens are dropped. Only committed tokens count as computed KV (so only they reach the radix cache); the
pages past the committed sequence, which hold rejected drafts only, go back to the allocator.

Constrained requests speculate too: their drafts are cut to the prefix the grammar accepts, every verified
row is masked with what the grammar allows after the drafts before it (``verify.constrain_rows``: the
matcher walks the drafts and rolls back), and the commit advances the matcher by each committed token, so the
output is what constrained decoding without speculation would emit. Requests that decode without speculation
(the rule, in one place: :func:`ineligible`): those whose grammar backend cannot roll back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sglang.srt.constrained.base_grammar_backend import accept_committed, can_rollback
from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.runtime_context import get_spec
from sglang.srt.speculative.cost_meter import VerifyCostMeter
from sglang.srt.speculative.draft_policy import COMPUTE_KNEE, DraftState, fit_budget, verify_costs
from sglang.srt.speculative.verify import force_greedy, grammar_prefix

if TYPE_CHECKING:  # the scheduler owns this object and hands it its batches (no import back into managers)
    from sglang.srt.managers.schedule_batch import Req, ScheduleBatch

logger = logging.getLogger("sglang.srt.managers.scheduler")

DECODE_LOG_INTERVAL = 40  # decode steps between two "Decode batch" log lines, upstream's default
# the cost meter's line (after a decode log line) when its factor moved this much since the last one, at most this often
CALIBRATION_LOG_MOVE, CALIBRATION_LOG_EVERY = 0.2, 30.0


def ineligible(req: Req) -> str | None:
    """Why ``req`` decodes without speculation (None: it speculates)."""
    grammar = req.sampler.grammar
    if grammar is not None and not can_rollback(grammar):
        return f"its grammar matcher ({type(grammar).__name__}) cannot roll back"
    return None


@dataclass
class ReqSpec:
    """One request's speculative counters (upstream's ``meta_info`` fields) and draft state."""

    verify_ct: int = 0
    proposed: int = 0
    accepted: int = 0
    histogram: list[int] = field(default_factory=list)  # [n]: verify steps that accepted n drafts
    state: DraftState = field(default_factory=DraftState)
    # STANDALONE: the draft model's KV covers the first ``draft_len`` tokens while the request holds the page
    # list ``draft_pages`` (a new list: it was released and matched again); this step drafted ``draft_k``
    # tokens from a sequence of ``draft_base`` tokens
    draft_len: int = 0
    draft_pages: Any = None
    draft_base: int = 0
    draft_k: int = 0
    match: tuple[int, bool] = (0, False)  # NGRAM: the match this step's drafts continue (length, ambiguous)

    def meta(self, completion_tokens: int) -> dict[str, Any]:
        """Upstream's names and their newer aliases."""
        rate = self.accepted / self.proposed if self.proposed else 0.0
        hist = list(self.histogram)
        return {"spec_verify_ct": self.verify_ct, "spec_accept_length": completion_tokens / self.verify_ct if self.verify_ct else 0.0,
                "spec_accept_rate": rate, "spec_accept_token_num": self.accepted, "spec_draft_token_num": self.proposed,
                "spec_num_correct_drafts": self.accepted, "spec_num_proposed_drafts": self.proposed, "spec_accepted_drafts": self.accepted,
                "spec_proposed_drafts": self.proposed, "spec_accept_histogram": hist, "spec_correct_drafts_histogram": hist}


class Speculator:
    """The algorithm-independent part; subclasses implement :meth:`propose` (and the hooks after it)."""

    algorithm = ""

    def __init__(self, scheduler: Any, check_finished: Callable[..., Any], build_output: Callable[[list[Any]], Any]) -> None:
        self.sched = scheduler
        # the scheduler's finish check and output message, handed in: this package does not import managers (layering)
        self.check_finished, self.build_output = check_finished, build_output
        self.reset_stats()
        self.decode_steps = 0
        self.emitted = 0  # tokens emitted by decode-phase steps, never reset: the log line's throughput
        self.last_log = (time.monotonic(), 0)
        # the host's verify-cost table, calibrated by what this server's verifies measure (kept across /flush_cache:
        # what it learns is about the machine and the model, not the cache)
        self.meter = VerifyCostMeter(verify_costs())
        self.meter_logged = (1.0, 0.0)  # the factor the last calibration line reported, and when (_log)

    @staticmethod
    def create(scheduler: Any, check_finished: Callable[..., Any], build_output: Callable[[list[Any]], Any]) -> Speculator | None:
        """The speculator ``--speculative-algorithm`` asks for (None: off)."""
        algo = get_spec().speculative_algorithm
        if algo is None:
            return None
        cls: type[Speculator]
        if algo == "NGRAM":
            from sglang.srt.speculative.ngram_worker import NgramSpeculator as cls
        elif algo == "STANDALONE":
            from sglang.srt.speculative.standalone_worker import StandaloneSpeculator as cls
        else:  # check_server_args refuses the others first; this guards in-process builders
            raise ValueError(f"--speculative-algorithm {algo} is not implemented; use NGRAM or STANDALONE")
        greedy = force_greedy(algo)  # read once at start-up: a typo in SGLANG_NGRAM_FORCE_GREEDY_VERIFY stops it here
        spec = cls(scheduler, check_finished, build_output)
        logger.info("speculative decoding: %s, up to %d tokens verified per request and step, off at %d running requests "
                    "(the compute knee)%s", algo, spec.max_drafts() + 1, COMPUTE_KNEE,
                    "; sampling requests verified greedily (SGLANG_NGRAM_FORCE_GREEDY_VERIFY)" if greedy else "")
        return spec

    # -- what an algorithm provides ---------------------------------------------------------------------
    def max_drafts(self) -> int:
        """Most drafts one request verifies per step."""
        return max(0, get_spec().speculative_num_draft_tokens - 1)

    def want(self, req: Req, k_max: int) -> int:
        """Drafts ``req`` asks for this step (the adaptive draft length: ``draft_policy``, priced by the meter's table)."""
        return req.spec.state.want(k_max, costs=self.meter.table)

    def propose(self, reqs: list[Req], ks: list[int]) -> tuple[list[list[int]], list[Any]]:
        """Per request at most ``ks[i]`` drafts with KV pages for them, and per request the draft's probability
        rows (one ``[V]`` tensor per draft, for rejection sampling) or None (deterministic drafts)."""
        raise NotImplementedError

    def learn(self, req: Req, proposed: int, verified: int) -> None:
        """After a verify: ``verified`` of ``req``'s ``proposed`` drafts matched the target (before finish checks)."""
        req.spec.state.update(proposed, verified)

    def committed(self, req: Req, proposed: int, accepted: int) -> None:
        """After a verify committed ``accepted`` of ``req``'s ``proposed`` drafts (before a finished request is released)."""

    def released(self, req: Req) -> None:
        """``req`` finished in a verify step."""

    def after_extend(self, batch: ScheduleBatch) -> None:
        """An EXTEND forward of the target ran (prefill, a chunk, jump-forward tokens)."""

    def cacheable_len(self, req: Req) -> int:
        """Leading tokens of ``req`` whose KV every pool of the slot space holds (what the radix cache may take)."""
        return req.kv_len

    def housekeep(self) -> None:
        """Periodic clean-up (every decode log line)."""

    # -- metrics ------------------------------------------------------------------------------------------
    def reset_stats(self) -> None:
        """Server-level counters (``avg_spec_accept_length``): reset by ``/flush_cache``."""
        self.steps = self.tokens = self.proposed = self.accepted = 0

    def flush(self) -> None:
        self.reset_stats()

    @property
    def avg_accept_length(self) -> float | None:
        return self.tokens / self.steps if self.steps else None

    @property
    def accept_rate(self) -> float | None:
        return self.accepted / self.proposed if self.proposed else None

    def timed(self, batch: ScheduleBatch, seconds: float) -> None:
        """The scheduler ran ``batch``'s forward in ``seconds``: a lone request's decode step or verify feeds the
        cost meter (a batch of several prices its rows against a wider decode step: not this table's unit)."""
        if len(batch.reqs) != 1:
            return
        if batch.mode is ForwardMode.DECODE:
            self.meter.observe(1, seconds)
        elif batch.mode is ForwardMode.TARGET_VERIFY:
            self.meter.observe(1 + len(batch.drafts[0]), seconds)

    # -- planning -----------------------------------------------------------------------------------------
    def plan(self, batch: ScheduleBatch) -> ScheduleBatch:
        """The decode ``batch`` as a verify batch when some request has drafts; else ``batch`` itself."""
        self.decode_steps += 1
        if self.decode_steps % DECODE_LOG_INTERVAL == 0:
            self._log(len(batch.reqs))
        reqs = batch.reqs
        k_max = self.max_drafts()
        wants = [0] * len(reqs)
        for r in reqs:
            if r.spec is None:
                r.spec = ReqSpec()
        if k_max and len(reqs) < COMPUTE_KNEE:
            for i, r in enumerate(reqs):
                if ineligible(r) is None:
                    room = min(r.params.max_new_tokens - len(r.output_ids), self.sched.context_length - r.seq_len) - 1
                    wants[i] = min(self.want(r, k_max), max(0, room))
        ks = fit_budget(wants, len(reqs))
        drafts, probs = self.propose(reqs, ks) if any(ks) else ([[] for _ in reqs], [None] * len(reqs))
        for i, r in enumerate(reqs):
            if drafts[i] and r.sampler.grammar is not None:  # only what the grammar can emit is worth a row
                n = grammar_prefix(drafts[i], r.sampler)
                drafts[i] = drafts[i][:n]
                if probs[i] is not None:
                    probs[i] = probs[i][:n]
        for r, d in zip(reqs, drafts):
            r.spec.verify_ct += 1
            self.steps += 1
            if not d:
                self.tokens += 1  # a plain row emits one token
                self.emitted += 1
                r.spec.histogram[:1] = [(r.spec.histogram or [0])[0] + 1]
        if not any(drafts):
            return batch
        return type(batch)(ForwardMode.TARGET_VERIFY, list(reqs), [1 + len(d) for d in drafts], drafts, probs)

    # -- committing ---------------------------------------------------------------------------------------
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
        grammar = req.sampler.grammar
        n = 0
        for t, info in zip(toks, infos):
            req.output_ids.append(t)
            req.pending.append(t)
            req.sampler.observe(t)
            if grammar is not None:
                accept_committed(grammar, t, req.params.constraint)
            if info is not None:
                req.pending_logprobs.append(info)
            n += 1
            req.finished_reason = {"type": "abort"} if req.aborted else self.check_finished(req, t, s.eos_ids, s.tokenizer, s.context_length)
            if req.finished_reason is None and grammar is not None and grammar.is_terminated():
                req.finished_reason = {"type": "stop", "matched": t}  # the grammar is complete: nothing can follow
            if req.finished_reason is not None:
                break  # the rest of the emitted tokens are dropped
        accepted = min(n, len(toks) - 1)  # drafts among the committed tokens (the last emitted one is the target's)
        req.kv_len += n  # the last token and the committed drafts before the newest token have valid KV
        sp = req.spec
        sp.proposed += len(drafts)
        sp.accepted += accepted
        self.learn(req, len(drafts), len(toks) - 1)
        sp.histogram.extend([0] * (accepted + 1 - len(sp.histogram)))
        sp.histogram[accepted] += 1
        self.tokens += n
        self.emitted += n
        self.proposed += len(drafts)
        self.accepted += accepted
        keep = -(-req.seq_len // s.page_size)  # pages past the committed sequence hold rejected drafts only
        if len(req.pages) > keep:
            s.allocator.free(req.pages[keep:])
            del req.pages[keep:]
        self.committed(req, len(drafts), accepted)
        if req.finished_reason is None and grammar is not None and s.jump_forward and not req.params.logprobs \
                and s._jump_forward(req, grammar) and req.finished_reason is None:
            s.running.remove(req)  # its forced tokens are prefilled in one extend step, then it decodes again
            s.waiting.appendleft(req)
            return
        if req.finished_reason is not None:
            self.released(req)
            if req in s.running:
                s.running.remove(req)
            s.live.pop(req.rid, None)
            s._release(req, cache=True)

    def _log(self, running: int) -> None:
        now = time.monotonic()
        t0, tok0 = self.last_log
        self.last_log = (now, self.emitted)  # not self.tokens: /flush_cache resets it (a negative rate once was)
        logger.info("Decode batch. #running-req: %d, accept len: %.2f, accept rate: %.2f, gen throughput (token/s): %.2f",
                    running, self.avg_accept_length or 0.0, self.accept_rate or 0.0, (self.emitted - tok0) / max(now - t0, 1e-6))
        scale, when = self.meter_logged
        if abs(self.meter.scale - scale) >= CALIBRATION_LOG_MOVE and now - when >= CALIBRATION_LOG_EVERY:
            self.meter_logged = (self.meter.scale, now)  # a line of its own: upstream's parsers read the one above
            logger.info("speculative decoding: %s", self.meter.describe())
        self.housekeep()
