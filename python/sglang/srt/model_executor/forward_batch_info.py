"""``ForwardBatch``: the device-side view of one forward, built by the model runner."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

import torch


class ForwardMode(enum.Enum):
    EXTEND = "extend"  # one or more new tokens per request (prefill, chunked prefill)
    DECODE = "decode"  # exactly one new token per request
    TARGET_VERIFY = "target_verify"  # speculative: [last token + drafts] per request, logits for every row (runs as EXTEND)


@dataclass
class ForwardBatch:
    mode: ForwardMode
    input_ids: torch.Tensor  # [T] new tokens of every request, concatenated
    positions: torch.Tensor  # [T]
    out_cache_loc: torch.Tensor  # [T] KV slots the new tokens are written to
    prefix_lens: list[int]  # per request: tokens already in the KV cache
    extend_lens: list[int]  # per request: new tokens in this forward
    logits_indices: torch.Tensor  # [B] row of each request's last new token in T
    kv_slots: list[torch.Tensor] = field(default_factory=list)  # EXTEND: per request, every KV slot after this forward
    kv_index: torch.Tensor | None = None  # DECODE: [B, Lmax] KV slots, padded
    kv_lens: torch.Tensor | None = None  # DECODE: [B] KV length after this forward
    attn: Any = field(default=None)  # attention-backend metadata for this forward

    @property
    def batch_size(self) -> int:
        return len(self.extend_lens)


@dataclass
class ModelWorkerBatch:
    """What the scheduler hands the worker: token ids and page ids, host lists only."""

    mode: ForwardMode
    new_tokens: list[list[int]]  # per request: tokens whose KV this forward computes
    prefix_lens: list[int]  # per request: tokens already in the KV cache
    pages: list[list[int]]  # per request: pages covering prefix + new tokens
    samplers: list[Any]  # per request: RequestSampler, or None when no token is sampled
    # EXTEND only, per request: rows [lo, hi) of its new tokens whose next-token log-probability is wanted
    # (prompt log-probabilities), or None; the tokens those rows predict; how many top alternatives
    input_logprob_rows: list[tuple[int, int] | None] = field(default_factory=list)
    input_logprob_targets: list[list[int]] = field(default_factory=list)
    input_logprob_top: list[int] = field(default_factory=list)
    # per request: the server-minted lora_id of its adapter, or None (the base model); empty: no adapter row
    lora_ids: list[str | None] = field(default_factory=list)
    # TARGET_VERIFY only, per request: the drafted tokens that follow its last token in new_tokens
    drafts: list[list[int]] = field(default_factory=list)
    # TARGET_VERIFY only, per request: the draft model's probability row ([V]) of each draft, or None (deterministic drafts)
    draft_probs: list[Any] = field(default_factory=list)
    # filled by the worker: per request, one (logprob, [(token, logprob), ...]) per wanted row
    input_logprobs: list[list[Any]] = field(default_factory=list)
