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
        self.bias: tuple[torch.Tensor, torch.Tensor] | None = None  # logit_bias as (token ids, values), built at first use
        # penalties' state over the vocabulary [V], built at the first penalized step and kept in step by observe():
        # the tokens seen (prompt and output: repetition) and the output counts (frequency, presence)
        self.dense = True  # False on penalize_with's views, which keep only the dicts
        self.seen_mask: torch.Tensor | None = None
        self.count_vec: torch.Tensor | None = None

    def observe(self, token: int) -> None:
        self.counts[token] = self.counts.get(token, 0) + 1
        if self.seen_mask is not None:
            self.seen_mask[token] = True
        if self.count_vec is not None:
            self.count_vec[token] += 1

    @property
    def needs_penalty(self) -> bool:
        p = self.params
        return p.repetition_penalty != 1.0 or p.frequency_penalty != 0.0 or p.presence_penalty != 0.0 or bool(p.logit_bias)


class SamplingError(RuntimeError):
    """Sampling one request failed (e.g. its probabilities are not finite); only that request fails."""

    def __init__(self, row: int, message: str) -> None:
        super().__init__(message)
        self.row = row


# from this many seen tokens (repetition) or distinct output tokens (frequency, presence) a request's sampler keeps them
# as vectors over the vocabulary: on the 2-core EPYC a step cost 0.14 ms at 150 seen tokens and 2.6 ms at 10,000 when
# they became a tensor every step; the vector's fixed cost is 0.2-0.3 ms
DENSE_PENALTY_MIN = (1024, 256)


def _penalize(logits: torch.Tensor, s: RequestSampler) -> None:
    """Apply ``s``'s penalties and logit bias in place to one row [V]; :func:`penalize_with`'s views use the dicts."""
    p = s.params
    dense = s.dense
    if p.repetition_penalty != 1.0:
        if dense and (s.seen_mask is not None or len(s.prompt_tokens) + len(s.counts) >= DENSE_PENALTY_MIN[0]):
            if s.seen_mask is None:
                s.seen_mask = torch.zeros(logits.numel(), dtype=torch.bool)
                s.seen_mask[torch.tensor(sorted(s.prompt_tokens | set(s.counts)), dtype=torch.long)] = True
            rp = torch.where(logits > 0, logits / p.repetition_penalty, logits * p.repetition_penalty)
            logits.copy_(torch.where(s.seen_mask, rp, logits))
        else:
            seen = torch.tensor(sorted(s.prompt_tokens | set(s.counts)), dtype=torch.long)
            if seen.numel():
                vals = logits[seen]
                logits[seen] = torch.where(vals > 0, vals / p.repetition_penalty, vals * p.repetition_penalty)
    if s.counts and (p.frequency_penalty or p.presence_penalty):
        if dense and (s.count_vec is not None or len(s.counts) >= DENSE_PENALTY_MIN[1]):
            if s.count_vec is None:
                s.count_vec = torch.zeros(logits.numel(), dtype=torch.float32)
                s.count_vec[torch.tensor(list(s.counts), dtype=torch.long)] = torch.tensor(list(s.counts.values()), dtype=torch.float32)
            c = s.count_vec.to(logits.dtype)
            logits -= torch.where(c > 0, p.frequency_penalty * c + p.presence_penalty, torch.zeros_like(c))
        else:
            ids = torch.tensor(list(s.counts), dtype=torch.long)
            cnt = torch.tensor(list(s.counts.values()), dtype=logits.dtype)
            logits[ids] -= p.frequency_penalty * cnt + p.presence_penalty
    if p.logit_bias:
        ids, values = _bias(s)
        logits[ids] += values.to(logits.dtype)


def _bias(s: RequestSampler) -> tuple[torch.Tensor, torch.Tensor]:
    """``s``'s logit_bias as (token ids, values): built once per request, not per step (two tensors from a dict cost
    ~0.1 ms a step at one row)."""
    if s.bias is None:
        b = s.params.logit_bias
        s.bias = (torch.tensor(list(b), dtype=torch.long), torch.tensor(list(b.values()), dtype=torch.float32))
    return s.bias


def _constrain(logits: torch.Tensor, samplers: list[RequestSampler], rows: list[int]) -> None:
    """Mask, in the float ``logits`` [B, V], every token a constrained row's grammar does not allow next."""
    backend = samplers[rows[0]].grammar_backend  # one backend per engine (--grammar-backend)
    mask = backend.allocate_vocab_mask(len(samplers))
    for i in rows:
        samplers[i].grammar.fill_vocab_mask(mask, i)
    backend.apply_vocab_mask(logits, mask, rows)


# the candidates top-p looks at, in turn, until their mass passes top_p (0: the whole vocabulary, sorted). On the 2-core
# EPYC, for 49,152 floats: the 64 largest 0.19 ms, the 1,024 largest 0.73 ms, a full sort 5.5 ms
NUCLEUS_TRIES = (64, 1024, 0)


def _filtered(logits: torch.Tensor, p: Any, row: int) -> torch.Tensor:
    """Probabilities ``[V]`` of one row after temperature, top-k, softmax and min-p (top-p not yet applied)."""
    return _filtered_rows(logits[None], [p], [row])[0]


def _filtered_rows(logits: torch.Tensor, params: list[Any], rows: list[int]) -> torch.Tensor:
    """:func:`_filtered` for each row of ``logits`` [R, V] with its own parameters (``rows``: the batch rows they
    are, for errors), the tensor work done once for all of them; a new tensor."""
    dev = logits.device
    x = logits.float() / torch.tensor([p.temperature for p in params], dtype=torch.float32, device=dev)[:, None]
    ks = torch.tensor([p.top_k for p in params], device=dev)
    if bool((ks > 0).any()):
        top = x.topk(int(ks.max().clamp(max=x.shape[1])), dim=-1).values
        kth = top.gather(1, (ks.clamp(min=1, max=top.shape[1]) - 1)[:, None])
        x.masked_fill_(x < torch.where(ks[:, None] > 0, kth, torch.full_like(kth, float("-inf"))), float("-inf"))
    probs = torch.softmax(x, -1)
    # parameters are validated; this guards what a hook or a model may produce. A softmax is never infinite (an infinite
    # or NaN logit makes NaNs), so the sum tells: 30x cheaper than isfinite(probs).all() on 49,152 floats
    finite = torch.isfinite(probs.sum(-1))
    if not bool(finite.all()):
        r = int((~finite).nonzero()[0, 0])
        raise SamplingError(rows[r], f"the probabilities of request row {rows[r]} are not finite (temperature {params[r].temperature}); "
                                     "the request fails")
    min_p = torch.tensor([p.min_p for p in params], dtype=probs.dtype, device=dev)
    if bool((min_p > 0).any()):
        probs.masked_fill_(probs < min_p[:, None] * probs.amax(-1, keepdim=True), 0)
    return probs


def nucleus(probs: torch.Tensor, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids, probs)`` of the tokens top-p keeps from ``probs`` [V], most probable first: upstream's rule, a token
    stays while the mass before it is at most ``top_p``. Looked for among the ``k`` most probable tokens
    (:data:`NUCLEUS_TRIES`): once their mass exceeds ``top_p`` no token outside them can stay, so the vocabulary
    is sorted only when the nucleus is larger than the last try (a flat distribution)."""
    n = probs.numel()
    for k in NUCLEUS_TRIES:
        k = n if k <= 0 else min(k, n)
        v, ix = probs.topk(k)  # sorted, descending
        cs = v.cumsum(0)
        # the keep rule's own float32 comparison; a zero among them: every token left is 0 too (min-p removed them)
        if k == n or bool(cs[-1] > top_p) or not bool(v[-1] > 0):
            break
    keep = (cs - v <= top_p) & (v > 0)  # a token of probability 0 is never drawn: not kept
    return ix[keep], v[keep]


def target_probs(logits: torch.Tensor, p: Any, row: int = 0) -> torch.Tensor:
    """The distribution a sampling request draws from, ``[V]`` (not renormalized after min-p / top-p:
    :func:`draw` does that): temperature, top-k, softmax, min-p, top-p, in upstream's order.
    Speculative verification draws from the same distribution (``sglang.srt.speculative.verify``)."""
    probs = _filtered(logits, p, row)
    if p.top_p < 1:
        ids, kept = nucleus(probs, p.top_p)
        probs = torch.zeros_like(probs).index_put_((ids,), kept)
    return probs


def draw(weights: torch.Tensor, generator: torch.Generator) -> int:
    """An index of ``weights`` [n] (non-negative, positive sum, not necessarily normalized) drawn with probability
    proportional to its weight, from one uniform of ``generator`` (inverse CDF). ``torch.multinomial`` on a 49,152-entry
    vector took 2-2.6 ms a draw on a 2-core EPYC; this 0.15 ms. Never an index of weight 0."""
    return _search(weights[None], [_uniform(generator)])[0]


def _rows(x: torch.Tensor, rows: list[int]) -> torch.Tensor:
    return x if len(rows) == x.shape[0] else x[rows]  # all of them: no copy


def _uniform(generator: torch.Generator) -> float:
    return float(torch.rand((), generator=generator, dtype=torch.float64))


def _search(weights: torch.Tensor, uniforms: list[float]) -> list[int]:
    """Per row of ``weights`` [R, n], the index whose cumulative weight first exceeds its uniform times the row's total
    (the searches in one call); never an index of weight 0."""
    # in float64: float32 boundaries shifted each token's chance (about 3e-4 in total variation over 49,152 tokens) and
    # left thousands of the least probable unreachable
    cdf = weights.double().cumsum(-1)
    u = torch.tensor(uniforms, dtype=torch.float64, device=cdf.device) * cdf[:, -1]
    picks = torch.searchsorted(cdf, u[:, None], right=True)[:, 0].tolist()
    n = weights.shape[1]
    for j, i in enumerate(picks):
        if i >= n or not float(weights[j, i]) > 0:  # u rounded up to the row's total: its last index with weight
            picks[j] = int(torch.nonzero(weights[j] > 0)[-1, 0])
    return picks


def sample_row(logits: torch.Tensor, p: Any, generator: torch.Generator, row: int = 0) -> int:
    """A token drawn from :func:`target_probs`'s distribution for one row ``[V]``, without building it in full when
    top-p keeps a few tokens (the draw is among those, by their probabilities)."""
    probs = _filtered(logits, p, row)
    if p.top_p < 1:
        ids, kept = nucleus(probs, p.top_p)
        return int(ids[draw(kept, generator)])
    return draw(probs, generator)


def sample_rows(logits: torch.Tensor, samplers: list[RequestSampler], rows: list[int]) -> list[int]:
    """The tokens of ``rows`` of ``logits`` [B, V] (requests that sample): what :func:`sample_row` draws for each row
    alone (one uniform from each request's generator, the same arithmetic row by row), with the tensor work done once
    for all of them. One row at a time cost ~1 ms a row at top-p (14 ms a step at 16 rows on the 2-core EPYC)."""
    if len(rows) == 1:
        i = rows[0]
        return [sample_row(logits[i], samplers[i].params, samplers[i].generator, i)]
    params = [samplers[i].params for i in rows]
    dev = logits.device
    probs = _filtered_rows(logits.index_select(0, torch.tensor(rows, device=dev)), params, rows)
    out: list[int | None] = [None] * len(rows)
    nuc = [r for r, p in enumerate(params) if p.top_p < 1]
    if nuc:  # top-p: among each row's first NUCLEUS_TRIES candidates where their mass passes top_p, else row by row
        top_p = torch.tensor([params[r].top_p for r in nuc], dtype=probs.dtype, device=dev)[:, None]
        v, ix = _rows(probs, nuc).topk(min(NUCLEUS_TRIES[0] or probs.shape[1], probs.shape[1]), dim=-1)
        cs = v.cumsum(-1)
        ok = ((cs[:, -1:] > top_p) | (v[:, -1:] <= 0))[:, 0].tolist()  # nucleus()'s first try, row by row
        us = [_uniform(samplers[rows[r]].generator) for r in nuc]
        picks = _search(v * (cs - v <= top_p), us)
        tokens = ix.gather(1, torch.tensor(picks, device=dev)[:, None])[:, 0].tolist()
        for j, r in enumerate(nuc):
            if ok[j] or v.shape[1] == probs.shape[1]:
                out[r] = tokens[j]
            else:  # a nucleus past the first try: this row alone, with the uniform it drew
                ids, w = nucleus(probs[r], params[r].top_p)
                out[r] = int(ids[_search(w[None], [us[j]])[0]])
    rest = [r for r, p in enumerate(params) if p.top_p >= 1]
    if rest:
        picks = _search(_rows(probs, rest), [_uniform(samplers[rows[r]].generator) for r in rest])
        for j, r in enumerate(rest):
            out[r] = picks[j]
    return out  # type: ignore[return-value]


def penalize_with(logits: torch.Tensor, s: RequestSampler, extra: list[int]) -> None:
    """Apply ``s``'s penalties and logit bias in place to one row ``[V]`` as if ``extra`` had been
    sampled after its tokens so far (a speculative row that follows drafted tokens)."""
    if not extra:
        _penalize(logits, s)
        return
    view = RequestSampler.__new__(RequestSampler)
    bias = _bias(s) if s.params.logit_bias else None  # built on the request's sampler, so a verify step reuses it
    view.params, view.prompt_tokens, view.counts, view.bias, view.dense = s.params, s.prompt_tokens, dict(s.counts), bias, False
    for t in extra:
        view.counts[t] = view.counts.get(t, 0) + 1
    _penalize(logits, view)


def greedy(logits: torch.Tensor, argmax: Callable[[torch.Tensor], torch.Tensor] | None = None) -> list[int]:
    """The index of each row's first maximum of ``logits`` [B, V]. ``argmax``: a kernel with
    ``torch.max(-1).indices``'s result on CPU float32 rows of unit stride (the CPU kernels' ``argmax_rows``)."""
    if argmax is not None and logits.dtype == torch.float32 and logits.device.type == "cpu" and logits.dim() == 2 and logits.stride(-1) == 1:
        return argmax(logits).tolist()
    return logits.max(-1).indices.tolist()  # max(dim) is several times faster than argmax on bfloat16; both pick the first maximum


def _only_bias(s: RequestSampler) -> bool:
    """Whether ``s`` is a greedy request with no logprobs and no grammar whose only adjustment is its logit bias."""
    p = s.params
    return (p.greedy and not p.logprobs and s.grammar is None and p.repetition_penalty == 1.0 and p.frequency_penalty == 0.0
            and p.presence_penalty == 0.0)


def greedy_biased(logits: torch.Tensor, samplers: list[RequestSampler], argmax: Callable[..., torch.Tensor]) -> list[int]:
    """:func:`greedy` over ``logits`` [B, V] as :func:`_penalize` would leave them when each request's only adjustment is
    its logit bias (:func:`_only_bias`), without the float32 copy of the rows: ``argmax`` (the CPU kernels'
    ``argmax_rows``) adds the sparse bias in place and restores the rows. The same tokens as the copy's path: one
    float32 add per biased entry and the same first-maximum rule."""
    biases = [_bias(s) if s.params.logit_bias else None for s in samplers]
    parts = [b for b in biases if b is not None]
    ids = parts[0][0] if len(parts) == 1 else torch.cat([b[0] for b in parts])
    values = parts[0][1] if len(parts) == 1 else torch.cat([b[1] for b in parts])
    offsets = [0]
    for b in biases:
        offsets.append(offsets[-1] + (0 if b is None else b[0].numel()))
    return argmax(logits, ids, values, torch.tensor(offsets, dtype=torch.long)).tolist()


def sample(logits: torch.Tensor, samplers: list[RequestSampler],
           argmax: Callable[..., torch.Tensor] | None = None) -> tuple[list[int], list[Any]]:
    """``logits`` [B, V] -> (token per request, logprob info per request or None).

    Greedy rows take the argmax of the logits as they come (a bfloat16 to
    float32 cast is exact, so the choice is the same); only penalties,
    grammar masks, sampling and logprobs work on a float32 copy. ``argmax``: see :func:`greedy`; when every
    request is greedy with at most a logit bias (:func:`_only_bias`), the kernel takes the bias itself
    (:func:`greedy_biased`: no copy and no indexing per row; on the 2-core Zen 4 EPYC a step's sampling with
    an EOS bias took 0.058 -> 0.027 ms at one row and 1.34 -> 0.22 ms at 16).
    """
    if (argmax is not None and any(s.params.logit_bias for s in samplers) and all(_only_bias(s) for s in samplers)
            and logits.dtype == torch.float32 and logits.device.type == "cpu" and logits.dim() == 2 and logits.stride(-1) == 1):
        out = greedy_biased(logits, samplers, argmax)
        for s, t in zip(samplers, out):
            s.observe(t)
        return out, [None] * len(samplers)
    constrained = [i for i, s in enumerate(samplers) if s.grammar is not None]
    if constrained or any(s.needs_penalty for s in samplers):
        logits = logits.float().clone()
        for i, s in enumerate(samplers):
            if s.needs_penalty:
                _penalize(logits[i], s)
        if constrained:
            _constrain(logits, samplers, constrained)
    out = greedy(logits, argmax)
    rows = [i for i, s in enumerate(samplers) if not s.params.greedy]
    if rows:
        for i, t in zip(rows, sample_rows(logits, samplers, rows)):
            out[i] = t
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
