"""Batched sampling: penalties, temperature, top-k / top-p / min-p, per-request seeds."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


class RequestSampler:
    """Per-request state the sampler needs: params, a generator, token counts."""

    def __init__(self, params: Any, default_seed: int, rid_hash: int) -> None:
        self.params = params
        seed = params.seed if params.seed is not None else (default_seed * 1_000_003 + rid_hash) % (2**63)
        self.generator = torch.Generator().manual_seed(seed)
        self.counts: dict[int, int] = {}  # output token -> occurrences (penalties)
        self.prompt_tokens: set[int] = set()
        self.grammar: Any = None  # the request's matcher (a BaseGrammarObject) when it is constrained
        self.grammar_backend: Any = None  # the BaseGrammarBackend that made it (its mask layout)

    def observe(self, token: int) -> None:
        self.counts[token] = self.counts.get(token, 0) + 1

    @property
    def needs_penalty(self) -> bool:
        p = self.params
        return p.repetition_penalty != 1.0 or p.frequency_penalty != 0.0 or p.presence_penalty != 0.0 or bool(p.logit_bias)


class SamplingError(RuntimeError):
    """Sampling one request failed (e.g. its probabilities are not finite); only that request fails."""

    def __init__(self, row: int, message: str) -> None:
        super().__init__(message)
        self.row = row


def _penalize(logits: torch.Tensor, s: RequestSampler) -> None:
    p = s.params
    if p.repetition_penalty != 1.0:
        seen = torch.tensor(sorted(s.prompt_tokens | set(s.counts)), dtype=torch.long)
        if seen.numel():
            vals = logits[seen]
            logits[seen] = torch.where(vals > 0, vals / p.repetition_penalty, vals * p.repetition_penalty)
    if s.counts and (p.frequency_penalty or p.presence_penalty):
        ids = torch.tensor(list(s.counts), dtype=torch.long)
        cnt = torch.tensor(list(s.counts.values()), dtype=logits.dtype)
        logits[ids] -= p.frequency_penalty * cnt + p.presence_penalty
    if p.logit_bias:
        ids = torch.tensor(list(p.logit_bias), dtype=torch.long)
        logits[ids] += torch.tensor(list(p.logit_bias.values()), dtype=logits.dtype)


def _constrain(logits: torch.Tensor, samplers: list[RequestSampler], rows: list[int]) -> None:
    """Mask, in the float ``logits`` [B, V], every token a constrained row's grammar does not allow next."""
    backend = samplers[rows[0]].grammar_backend  # one backend per engine (--grammar-backend)
    mask = backend.allocate_vocab_mask(len(samplers))
    for i in rows:
        samplers[i].grammar.fill_vocab_mask(mask, i)
    backend.apply_vocab_mask(logits, mask, rows)


def target_probs(logits: torch.Tensor, p: Any, row: int = 0) -> torch.Tensor:
    """The distribution a sampling request draws from, ``[V]`` (not renormalized after min-p / top-p:
    ``multinomial`` does that): temperature, top-k, softmax, min-p, top-p, in upstream's order.
    Speculative verification draws from the same distribution (``sglang.srt.speculative.verify``)."""
    x = logits.float() / p.temperature
    if p.top_k > 0:
        kth = torch.topk(x, min(p.top_k, x.numel())).values[-1]
        x = x.masked_fill(x < kth, float("-inf"))
    probs = torch.softmax(x, -1)
    if not bool(torch.isfinite(probs).all()):  # parameters are validated; this guards what a hook or a model may produce
        raise SamplingError(row, f"the probabilities of request row {row} are not finite (temperature {p.temperature}); the request fails")
    if p.min_p > 0:
        probs = probs.masked_fill(probs < p.min_p * probs.max(), 0)
    if p.top_p < 1:
        sp, si = probs.sort(descending=True)
        drop = sp.cumsum(-1) - sp > p.top_p  # keep the smallest prefix reaching top_p
        probs = probs.scatter(0, si, sp.masked_fill(drop, 0))
    return probs


def penalize_with(logits: torch.Tensor, s: RequestSampler, extra: list[int]) -> None:
    """Apply ``s``'s penalties and logit bias in place to one row ``[V]`` as if ``extra`` had been
    sampled after its tokens so far (a speculative row that follows drafted tokens)."""
    if not extra:
        _penalize(logits, s)
        return
    view = RequestSampler.__new__(RequestSampler)
    view.params, view.prompt_tokens, view.counts = s.params, s.prompt_tokens, dict(s.counts)
    for t in extra:
        view.counts[t] = view.counts.get(t, 0) + 1
    _penalize(logits, view)


def greedy(logits: torch.Tensor, argmax: Callable[[torch.Tensor], torch.Tensor] | None = None) -> list[int]:
    """The index of each row's first maximum of ``logits`` [B, V]. ``argmax``: a kernel with
    ``torch.max(-1).indices``'s result on CPU float32 rows of unit stride (the CPU kernels' ``argmax_rows``)."""
    if argmax is not None and logits.dtype == torch.float32 and logits.device.type == "cpu" and logits.dim() == 2 and logits.stride(-1) == 1:
        return argmax(logits).tolist()
    return logits.max(-1).indices.tolist()  # max(dim) is several times faster than argmax on bfloat16; both pick the first maximum


def sample(logits: torch.Tensor, samplers: list[RequestSampler],
           argmax: Callable[[torch.Tensor], torch.Tensor] | None = None) -> tuple[list[int], list[Any]]:
    """``logits`` [B, V] -> (token per request, logprob info per request or None).

    Greedy rows take the argmax of the logits as they come (a bfloat16 to
    float32 cast is exact, so the choice is the same); only penalties,
    grammar masks, sampling and logprobs work on a float32 copy. ``argmax``: see :func:`greedy`.
    """
    constrained = [i for i, s in enumerate(samplers) if s.grammar is not None]
    if constrained or any(s.needs_penalty for s in samplers):
        logits = logits.float().clone()
        for i, s in enumerate(samplers):
            if s.needs_penalty:
                _penalize(logits[i], s)
        if constrained:
            _constrain(logits, samplers, constrained)
    out = greedy(logits, argmax)
    for i, s in enumerate(samplers):
        p = s.params
        if p.greedy:
            continue
        out[i] = int(torch.multinomial(target_probs(logits[i], p, i), 1, generator=s.generator))
    infos: list[Any] = [None] * len(samplers)
    if any(s.params.logprobs for s in samplers):
        logp = torch.log_softmax(logits.float(), -1)
        for i, s in enumerate(samplers):
            if s.params.logprobs:
                top = []
                if s.params.top_logprobs_num:
                    v, ix = logp[i].topk(s.params.top_logprobs_num)
                    top = list(zip(ix.tolist(), v.tolist()))
                infos[i] = (float(logp[i, out[i]]), top)
    for s, t in zip(samplers, out):
        s.observe(t)
    return out, infos


def prompt_logprobs(logits: torch.Tensor, batch: Any) -> list[list[Any]]:
    """``logits`` [E, V]: the rows ``batch.input_logprob_rows`` asked for, in request order ->
    per request, ``(logprob of the token the row predicts, top alternatives)`` per row.

    Computed in float32 on the raw logits (no penalties, no bias): the model's own distribution.
    """
    logp = torch.log_softmax(logits.float(), -1)
    out: list[list[Any]] = []
    at = 0
    for span, targets, top_n in zip(batch.input_logprob_rows, batch.input_logprob_targets, batch.input_logprob_top):
        if not span:
            out.append([])
            continue
        rows = logp[at : at + span[1] - span[0]]
        at += span[1] - span[0]
        picked = rows.gather(1, torch.tensor(targets, dtype=torch.long)[:, None])[:, 0].tolist()
        tops: list[list[tuple[int, float]]] = [[] for _ in picked]
        if top_n:
            v, ix = rows.topk(top_n, dim=-1)
            tops = [list(zip(i, x)) for i, x in zip(ix.tolist(), v.tolist())]
        out.append(list(zip(picked, tops)))
    return out
