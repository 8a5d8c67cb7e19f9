"""``Req`` and ``ScheduleBatch``: the scheduler's view, requests and page ids only."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sglang.srt.layers.sampler import RequestSampler
from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.sampling.sampling_params import SamplingParams


class Req:
    """One generation request. ``kv_len`` tokens of ``fill_ids`` have KV in ``pages``."""

    def __init__(self, rid: str, input_ids: list[int], params: SamplingParams, sampler: RequestSampler, stream: bool,
                 lora_id: str | None = None) -> None:
        self.rid = rid
        self.lora_id = lora_id  # the adapter's server-minted id (the tokenizer manager's registry), None: the base model
        self.origin_input_ids = input_ids
        self.params = params
        self.sampler = sampler
        self.stream = stream
        self.output_ids: list[int] = []
        self.pages: list[int] = []
        self.kv_len = 0
        self.cached_tokens = 0  # prompt tokens served from the prefix cache
        self.last_node: Any = None  # locked radix node covering the shared prefix
        self.shared_pages = 0  # leading pages owned by the radix tree
        self.finished_reason: dict[str, Any] | None = None
        self.pending: list[int] = []  # tokens not yet sent to the detokenizer
        self.pending_logprobs: list[Any] = []
        # prompt log-probabilities: of tokens input_lp_from.. of the prompt, computed while prefilling
        self.input_lp_from: int | None = max(1, params.logprob_start_len) if params.logprobs and params.logprob_start_len >= 0 else None
        self.input_logprobs: list[Any] = []
        self.input_lp_sent = False
        self.aborted = False
        self.bootstrap: dict[str, Any] | None = None  # disaggregation: the prefill server's host, port and room
        self.disagg: Any = None  # disaggregation: the side's per-request state (a prefill server: the decode side's page list)
        self.spec: Any = None  # speculative decoding's per-request counters (speculative.ngram_worker.ReqSpec)

    def input_logprob_rows(self, n: int) -> tuple[int, int] | None:
        """Rows ``[lo, hi)`` of the next ``n`` new tokens whose logits give prompt log-probabilities still missing."""
        if self.input_lp_from is None:
            return None
        k, last = self.kv_len, len(self.origin_input_ids) - 1  # the last prompt row predicts the first output token
        want = self.input_lp_from + len(self.input_logprobs) - 1  # the row predicting the next missing token
        lo, hi = max(k, want), min(k + n, last)
        return (lo - k, hi - k) if lo < hi else None

    @property
    def fill_ids(self) -> list[int]:
        return self.origin_input_ids + self.output_ids

    @property
    def seq_len(self) -> int:
        return len(self.origin_input_ids) + len(self.output_ids)


@dataclass
class ScheduleBatch:
    """Requests of one forward and how many new tokens each contributes."""

    mode: ForwardMode
    reqs: list[Req]
    extend_lens: list[int] = field(default_factory=list)
    drafts: list[list[int]] = field(default_factory=list)  # TARGET_VERIFY: per request, the drafts after its last token
    # TARGET_VERIFY: per request, the draft model's probability row of each draft, or None (deterministic drafts)
    draft_probs: list[Any] = field(default_factory=list)

    def sample_mask(self) -> list[bool]:
        """A request samples when this forward reaches the end of its ``fill_ids`` (a verify: every request)."""
        if self.mode is ForwardMode.TARGET_VERIFY:
            return [True] * len(self.reqs)
        return [r.kv_len + n == r.seq_len for r, n in zip(self.reqs, self.extend_lens)]

    def new_tokens(self) -> list[list[int]]:
        """Per request, the tokens whose KV this forward computes (a verify: the last token, then its drafts)."""
        if self.mode is ForwardMode.TARGET_VERIFY:
            return [r.fill_ids[r.kv_len : r.kv_len + 1] + d for r, d in zip(self.reqs, self.drafts)]
        return [r.fill_ids[r.kv_len : r.kv_len + n] for r, n in zip(self.reqs, self.extend_lens)]
