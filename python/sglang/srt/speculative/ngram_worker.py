"""NGRAM speculative decoding: drafts from a shared n-gram store of every request's prompt and output (no draft model).

The verify batch, the commit and the metrics are the shared :class:`~sglang.srt.speculative.spec_worker.Speculator`;
this module feeds the :class:`NgramStore` with committed tokens and asks it for each request's chain of drafts,
whose length adapts to the measured acceptance (``draft_policy``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sglang.srt.runtime_context import get_spec
from sglang.srt.speculative.draft_policy import CostTable, DraftState, MatchAcceptance
from sglang.srt.speculative.ngram_store import ENTRY_BYTES, NgramStore
from sglang.srt.speculative.spec_worker import Speculator

if TYPE_CHECKING:
    from sglang.srt.managers.schedule_batch import Req


def ngram_want(store: NgramStore, matches: MatchAcceptance, rid: str, state: DraftState, k_max: int,
               costs: CostTable | None = None) -> tuple[int, tuple[int, bool]]:
    """(drafts to ask for, the match: its length and whether it is ambiguous) for request ``rid`` this step: none
    without a match, else the draft length for the request's acceptance and its match kind's (``DraftState.want``,
    priced by ``costs``: None, the host's table). Who calls: the speculator (its meter's table), and
    ``bench/spec_replay.py``, which replays recorded answers through this same rule."""
    match = store.match(rid)
    return (state.want(k_max, matches.rate(*match), costs) if match[0] else 0), match


class NgramSpeculator(Speculator):
    algorithm = "NGRAM"

    def __init__(self, scheduler: Any, check_finished: Callable[..., Any], build_output: Callable[[list[Any]], Any]) -> None:
        super().__init__(scheduler, check_finished, build_output)
        spec = get_spec()
        self.store = NgramStore(spec.speculative_ngram_min_match_window_size, spec.speculative_ngram_max_match_window_size,
                                spec.speculative_ngram_max_trie_depth, spec.speculative_ngram_capacity, spec.speculative_ngram_match_type)
        if self.store.capacity < spec.speculative_ngram_capacity:
            logging.getLogger("sglang.srt.managers.scheduler").info(
                "NGRAM store: at most %d n-gram entries (about %d MiB; SGLANG_SPEC_NGRAM_MAX_MB), below "
                "--speculative-ngram-capacity %d", self.store.capacity, self.store.capacity * ENTRY_BYTES >> 20, spec.speculative_ngram_capacity)

        self.matches = MatchAcceptance()  # kept across /flush_cache: what it learns is about the model, not the cache

    def want(self, req: Req, k_max: int) -> int:
        self._sync(req)
        k, req.spec.match = ngram_want(self.store, self.matches, req.rid, req.spec.state, k_max, self.meter.table)
        return k

    def learn(self, req: Req, proposed: int, verified: int) -> None:
        super().learn(req, proposed, verified)
        self.matches.update(req.spec.match[0], proposed, verified, req.spec.match[1])

    def flush(self) -> None:
        super().flush()
        self.store.clear()

    def _sync(self, req: Req) -> None:
        seq = self.store.seqs.get(req.rid)
        if seq is None:
            self.store.add(req.rid, req.fill_ids)
        elif len(seq) < req.seq_len:  # tokens committed outside a verify (decode, jump-forward)
            n0 = len(req.origin_input_ids)
            self.store.extend(req.rid, req.output_ids[len(seq) - n0 :] if len(seq) >= n0 else req.fill_ids[len(seq) :])

    def propose(self, reqs: list[Req], ks: list[int]) -> tuple[list[list[int]], list[Any]]:
        drafts: list[list[int]] = []
        for r, k in zip(reqs, ks):
            d: list[int] = []
            if k:
                d = self.store.draft(r.rid, k)  # want() synced the store
                if d and not self.sched._ensure_pages(r, r.kv_len + 1 + len(d)):
                    d = []  # no KV pages for the drafts: this request decodes plainly this step
            drafts.append(d)
        return drafts, [None] * len(reqs)  # deterministic drafts: target-only rejection sampling

    def committed(self, req: Req, proposed: int, accepted: int) -> None:
        self._sync(req)

    def released(self, req: Req) -> None:
        self.store.finish(req.rid)

    def forget(self, rids: set[str]) -> None:
        """Drop the store handles of requests that ended outside a verify (aborts, plain decode)."""
        for rid in [r for r in self.store.seqs if r not in rids]:
            self.store.finish(rid)

    def housekeep(self) -> None:
        self.forget(set(self.sched.live))
