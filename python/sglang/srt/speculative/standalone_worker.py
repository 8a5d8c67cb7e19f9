"""STANDALONE speculative decoding: a draft model proposes a chain, the target verifies it in one forward.

Each decode step every eligible request drafts ``--speculative-num-steps`` tokens (upstream's fixed chain,
``--speculative-eagle-topk 1``): the draft model first runs one extend forward over the request's tokens whose
draft KV is missing (the last committed token at least, plus anything committed while it decoded without
drafts) and then single-token forwards, all requests batched; greedy requests take the draft's argmax,
sampling ones draw from the draft's own distribution (temperature, top-k, min-p, top-p, penalties), whose
rows go to the verify for true rejection sampling (accept with ``min(1, p / q)``, else draw from
``max(0, p - q)``). Verification, commit and metrics are the shared ``Speculator``'s.

The draft's KV lives in its own pool at the target's slots (``draft_worker``). Which tokens it covers is
tracked per request (``ReqSpec.draft_len``): after a verify, the accepted drafts that were fed to the draft
model (all but the last one drafted); rejected positions are simply not counted and are overwritten later.
Prefill (every EXTEND forward of the target) runs on the draft too, so prompts have draft KV; the radix
cache takes only tokens both pools hold (:meth:`StandaloneSpeculator.cacheable_len`), so any prefix matched
from it has draft KV. A draft failure costs speculation, never a request: that step verifies nothing extra.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from sglang.srt.layers.sampler import draw, penalize_with, target_probs
from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.runtime_context import get_spec
from sglang.srt.speculative.spec_worker import ReqSpec, Speculator

if TYPE_CHECKING:
    from sglang.srt.managers.schedule_batch import Req, ScheduleBatch

logger = logging.getLogger("sglang.srt.managers.scheduler")

# Most tokens one request's draft catch-up computes in a step: a request that decoded without drafts for
# longer (a batch past the compute knee) catches up over several steps, drafting again once it is level.
CATCHUP_MAX = 512


class StandaloneSpeculator(Speculator):
    algorithm = "STANDALONE"

    def __init__(self, scheduler: Any, check_finished: Callable[..., Any], build_output: Callable[[list[Any]], Any]) -> None:
        from sglang.srt.speculative.draft_worker import DraftWorker

        super().__init__(scheduler, check_finished, build_output)
        self.draft = DraftWorker(scheduler.tp_worker)
        self.reported: set[str] = set()

    def max_drafts(self) -> int:
        return get_spec().speculative_num_steps

    def want(self, req: Req, k_max: int) -> int:
        return k_max  # upstream's fixed chain; the room and the compute-knee budget cut it

    # -- which tokens the draft pool holds --------------------------------------------------------------
    def _valid(self, req: Req) -> int:
        """Leading tokens of ``req`` with draft KV. A new page list (released, matched again) starts from the prefix
        the radix cache gave it, which has draft KV (the cache only takes what both pools hold)."""
        sp = req.spec
        if sp.draft_pages is not req.pages:
            sp.draft_pages, sp.draft_len = req.pages, req.shared_pages * self.sched.page_size
        return sp.draft_len

    def cacheable_len(self, req: Req) -> int:
        floor = req.shared_pages * self.sched.page_size
        sp = req.spec
        if sp is None or sp.draft_pages is not req.pages:
            return floor
        return max(floor, min(req.kv_len, sp.draft_len))

    def _failed(self, what: str, exc: BaseException) -> None:
        from sglang.plugin_core.hooks.faults import describe_fault, fail_fast

        if fail_fast(exc):
            raise exc
        msg = f"{what}: {describe_fault(exc)}"
        if msg not in self.reported:  # once per distinct fault: a draft that fails every step must not flood the log
            self.reported.add(msg)
            logger.warning("STANDALONE draft model failed (%s); the step verifies no drafts, requests go on", msg, exc_info=exc)

    # -- prefill -------------------------------------------------------------------------------------------
    def after_extend(self, batch: ScheduleBatch) -> None:
        """Run the draft over the tokens the target's extend just computed (and any it lacked before them)."""
        rows = []
        for r, n in zip(batch.reqs, batch.extend_lens):
            if r.spec is None:
                r.spec = ReqSpec()
            start, end = min(self._valid(r), r.kv_len), r.kv_len + n
            if end > start:
                rows.append((r, start, end))
        if not rows:
            return
        try:
            self.draft.forward(ForwardMode.EXTEND, [r.fill_ids[a:b] for r, a, b in rows], [a for _, a, _ in rows],
                               [list(r.pages) for r, _, _ in rows])
        except Exception as exc:
            self._failed("prefill", exc)  # the draft KV lags; the next drafting step catches it up
            return
        for r, _, b in rows:
            r.spec.draft_len = b

    # -- drafting ------------------------------------------------------------------------------------------
    def propose(self, reqs: list[Req], ks: list[int]) -> tuple[list[list[int]], list[Any]]:
        drafts: list[list[int]] = [[] for _ in reqs]
        probs: list[Any] = [None] * len(reqs)
        rows = []  # (index, request, drafts wanted, first token without draft KV, end of this step's catch-up)
        for i, (r, k) in enumerate(zip(reqs, ks)):
            r.spec.draft_k = 0
            if not k:
                continue
            start = min(self._valid(r), r.seq_len - 1)  # the last token's draft logits give the first draft
            end = min(r.seq_len, start + CATCHUP_MAX)
            if end < r.seq_len:
                k = 0  # far behind: only catch up this step
            elif not self.sched._ensure_pages(r, r.kv_len + 1 + k):  # the draft's KV and the verify's rows
                continue
            rows.append((i, r, k, start, end))
        if not rows:
            return drafts, probs
        try:
            self._draft(rows, drafts, probs)
        except Exception as exc:
            self._failed("drafting", exc)
            for i, r, *_ in rows:
                drafts[i], probs[i], r.spec.draft_k = [], None, 0
        return drafts, probs

    def _draft(self, rows: list[tuple[int, Req, int, int, int]], drafts: list[list[int]], probs: list[Any]) -> None:
        logits = self.draft.forward(ForwardMode.EXTEND, [r.fill_ids[a:b] for _, r, _, a, b in rows], [a for *_, a, _ in rows],
                                    [list(r.pages) for _, r, *_ in rows])
        for _, r, _, _, b in rows:
            r.spec.draft_len = b
        live = [(i, r, k) for i, r, k, _, _ in rows if k]
        for i, r, k in live:
            probs[i] = None if r.sampler.params.greedy else []
            r.spec.draft_base, r.spec.draft_k = r.seq_len, k
        step_logits, index = logits, {i: j for j, (i, *_) in enumerate(rows)}
        for step in range(max((k for _, _, k in live), default=0)):
            for i, r, k in live:
                if k > step:
                    self._pick(step_logits[index[i]], r, drafts[i], probs[i])
            nxt = [(i, r) for i, r, k in live if k > step + 1]
            if not nxt:
                break
            step_logits = self.draft.forward(ForwardMode.DECODE, [[drafts[i][-1]] for i, _ in nxt], [r.seq_len + step for _, r in nxt],
                                             [list(r.pages) for _, r in nxt])
            index = {i: j for j, (i, _) in enumerate(nxt)}

    @staticmethod
    def _pick(row: torch.Tensor, r: Req, drafted: list[int], rows: list[torch.Tensor] | None) -> None:
        """Append the draft's next token: its argmax for a greedy request, else a draw from its distribution
        (kept in ``rows`` for the verify's rejection sampling)."""
        s = r.sampler
        if s.needs_penalty:  # the draft sees the request's penalties as the target will
            row = row.float().clone()
            penalize_with(row, s, drafted)
        if rows is None:
            drafted.append(int(row.argmax()))
            return
        q = target_probs(row, s.params)
        q = q / q.sum()
        drafted.append(draw(q, s.generator))
        rows.append(q)

    def committed(self, req: Req, proposed: int, accepted: int) -> None:
        sp = req.spec
        if sp.draft_k and sp.draft_pages is req.pages:  # the last draft was never fed to the draft model
            sp.draft_len = sp.draft_base + min(accepted, sp.draft_k - 1)
        sp.draft_k = 0
