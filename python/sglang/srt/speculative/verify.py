"""Acceptance of drafted tokens against the target's logits: the greedy walk and target-only rejection sampling.

A request verifies the chain ``[root, d1 .. dk]`` in one forward; row ``j`` of its logits is the target's
distribution after ``root, d1 .. dj``. Greedy rows (temperature 0) accept ``d(j+1)`` while it is the row's
argmax; the first row that disagrees (or the last row) gives the bonus token, so the output is exactly
what greedy decoding would produce from the same logits.

Sampling rows use upstream's target-only rule for deterministic drafts: accept ``d`` with probability
``min(1, q(d) / threshold_acc)`` (or outright when ``q(d) >= threshold_single``); on rejection draw from
``q`` with ``d`` removed and renormalized; after k acceptances draw the bonus from the last row. At both
thresholds 1.0 every emitted token is distributed exactly as ``q``: accept ``d`` with ``q(d)``, else draw
``q(t) / (1 - q(d))`` for ``t != d``, which sums to ``q``. Exact-match acceptance is never used when sampling.

Drafts sampled from a draft model's distribution ``p`` (STANDALONE) use speculative sampling proper:
accept ``d`` with probability ``min(1, q(d) / (p(d) * threshold_acc))`` (or when ``q(d) >= threshold_single``),
else draw from ``max(0, q - p)`` renormalized; at thresholds 1.0 the emitted token is distributed as ``q``
for any ``p`` (the accepted mass ``min(p, q)`` plus the residual ``max(0, q - p)`` is ``q``).

``q`` is the request's own sampling distribution (``layers.sampler.target_probs``: temperature, top-k,
min-p, top-p) after its penalties and logit bias, applied per row as if the preceding drafts had been
sampled (``penalize_with``), so penalised requests stay exact too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from sglang.srt.layers.sampler import draw, greedy, penalize_with, target_probs
from sglang.utils.env import env_flag

FORCE_GREEDY_ENV = "SGLANG_NGRAM_FORCE_GREEDY_VERIFY"  # upstream's switch: NGRAM verifies sampling requests greedily


def force_greedy(algorithm: str | None) -> bool:
    """Whether verify steps of ``algorithm`` walk greedily for every request (NGRAM with ``SGLANG_NGRAM_FORCE_GREEDY_VERIFY``)."""
    return algorithm == "NGRAM" and env_flag(FORCE_GREEDY_ENV)


def _logprob_info(logp: torch.Tensor, token: int, top_n: int) -> tuple[float, list[tuple[int, float]]]:
    top: list[tuple[int, float]] = []
    if top_n:
        v, ix = logp.topk(top_n)
        top = list(zip(ix.tolist(), v.tolist()))
    return float(logp[token]), top


def constrain_rows(rows: torch.Tensor, drafts: list[int], s: Any) -> None:
    """Mask each float row of ``rows`` [k+1, V] in place with what ``s``'s grammar allows after the drafts before
    it (row ``j``: after ``drafts[:j]``), as ``sample`` masks a decode row; the matcher ends where it began.

    The walk stops at the first draft the grammar refuses (that row's mask rejects the draft, so no later row is
    reached) or that completes the grammar (the commit finishes the request there); rows after it stay unmasked."""
    g, backend = s.grammar, s.grammar_backend
    mask = backend.allocate_vocab_mask(len(drafts) + 1)
    walked = 0
    for j in range(len(drafts) + 1):
        g.fill_vocab_mask(mask, j)
        if j == len(drafts) or not g.accept_token(drafts[j]):
            break
        walked += 1
        if g.is_terminated():
            break
    g.rollback(walked)
    backend.apply_vocab_mask(rows, mask, list(range(j + 1)))


def grammar_prefix(drafts: list[int], s: Any) -> int:
    """How many leading ``drafts`` ``s``'s grammar accepts, up to and including one that completes it (the rest
    cannot be emitted, so they are not verified); the matcher ends where it began."""
    g, n = s.grammar, 0
    for d in drafts:
        if not g.accept_token(d):
            break
        n += 1
        if g.is_terminated():
            break
    g.rollback(n)
    return n


def accept_chain(rows: torch.Tensor, drafts: list[int], s: Any, thr_single: float = 1.0, thr_acc: float = 1.0,
                 draft_probs: list[torch.Tensor] | None = None, force_greedy: bool = False,
                 argmax: Callable[[torch.Tensor], torch.Tensor] | None = None) -> tuple[list[int], list[Any]]:
    """``rows`` [k+1, V] logits of one request's ``[root] + drafts`` -> (emitted tokens, logprob info per token or None).

    ``draft_probs``: the distribution each draft was sampled from (a draft model's), or None (deterministic drafts).
    ``force_greedy`` (upstream's ``SGLANG_NGRAM_FORCE_GREEDY_VERIFY``): the greedy walk for sampling requests too,
    which then emit the target's argmax (lossy by design: the request no longer samples while it speculates).
    ``argmax``: the greedy walk's row argmax kernel (``sglang.srt.layers.sampler.greedy``); None: torch's.

    Emits the accepted drafts and one more token (1 .. k+1 tokens). Does not change ``s`` (the caller
    observes the tokens it commits); draws from ``s.generator`` only when the request samples.
    """
    p = s.params
    k = len(drafts)
    if s.needs_penalty or s.grammar is not None:
        rows = rows.float().clone()
        if s.needs_penalty:
            for j in range(k + 1):
                penalize_with(rows[j], s, drafts[:j])
        if s.grammar is not None:
            constrain_rows(rows, drafts, s)
    out: list[int] = []
    if p.greedy or force_greedy:
        best = greedy(rows, argmax)
        for j in range(k + 1):
            if j == k or best[j] != drafts[j]:
                out.append(best[j])
                break
            out.append(drafts[j])
    else:
        for j in range(k + 1):
            q = target_probs(rows[j], p, j)
            q = q / q.sum()
            if j == k:
                out.append(draw(q, s.generator))
                break
            d = drafts[j]
            qd = float(q[d])
            pd = 1.0 if draft_probs is None else float(draft_probs[j][d])  # a deterministic draft: a point mass
            coin = float(torch.rand((), generator=s.generator))
            if qd > 0 and (qd >= thr_single or coin * pd * thr_acc <= qd):  # never a token q excludes (a coin of 0.0)
                out.append(d)
                continue
            if draft_probs is None:
                residual = q.clone()
                residual[d] = 0
            else:
                residual = (q - draft_probs[j].to(q.dtype)).clamp_(min=0)
            total = float(residual.sum())
            out.append(draw(residual if total > 0 else q, s.generator))
            break
    infos: list[Any] = [None] * len(out)
    if p.logprobs:
        logp = torch.log_softmax(rows[: len(out)].float(), -1)  # the penalised logits, before temperature, as ``sample`` reports
        infos = [_logprob_info(logp[j], t, p.top_logprobs_num) for j, t in enumerate(out)]
    return out, infos


def verify(logits: torch.Tensor, drafts: list[list[int]], samplers: list[Any], thr_single: float = 1.0,
           thr_acc: float = 1.0, draft_probs: list[Any] | None = None, force_greedy: bool = False,
           argmax: Callable[[torch.Tensor], torch.Tensor] | None = None) -> tuple[list[list[int]], list[list[Any]]]:
    """``logits`` [sum(1 + len(d)), V], request after request -> per request, its emitted tokens and their infos.
    ``draft_probs``: per request, the draft model's rows of its drafts or None (deterministic drafts); empty: all None.
    ``force_greedy``: the greedy walk for every request with drafts (see :func:`accept_chain`). ``argmax``: the
    CPU kernels' row argmax for greedy rows (see :func:`sglang.srt.layers.sampler.greedy`), or None.

    Requests without drafts go through the ordinary ``sample`` (grammar masks included), one batch.
    """
    from sglang.srt.layers.sampler import sample

    tokens: list[list[int]] = [[] for _ in drafts]
    infos: list[list[Any]] = [[] for _ in drafts]
    starts, at = [], 0
    for d in drafts:
        starts.append(at)
        at += 1 + len(d)
    plain = [i for i, d in enumerate(drafts) if not d]
    if plain:
        ids, inf = sample(logits[[starts[i] for i in plain]], [samplers[i] for i in plain], argmax)
        for i, t, f in zip(plain, ids, inf):
            tokens[i], infos[i] = [t], [f]
    for i, d in enumerate(drafts):
        if d:
            probs = draft_probs[i] if draft_probs else None
            tokens[i], infos[i] = accept_chain(logits[starts[i] : starts[i] + 1 + len(d)], d, samplers[i], thr_single, thr_acc, probs,
                                               force_greedy, argmax)
    return tokens, infos
