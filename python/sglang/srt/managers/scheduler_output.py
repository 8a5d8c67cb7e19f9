"""Finish checks and the per-step output message of the scheduler."""

from __future__ import annotations

from typing import Any

from sglang.srt.managers.io_struct import BatchTokenIDOut
from sglang.srt.managers.schedule_batch import Req


def check_finished(req: Req, token: int, eos_ids: set[int], tokenizer: Any, context_length: int) -> dict[str, Any] | None:
    p = req.params
    if not p.ignore_eos and token in eos_ids:
        return {"type": "stop", "matched": token}
    if token in p.stop_token_ids:
        return {"type": "stop", "matched": token}
    if p.stop and tokenizer is not None:
        longest = max(len(s) for s in p.stop)
        tail = tokenizer.decode(req.output_ids[-(longest + 8) :], skip_special_tokens=p.skip_special_tokens)
        for s in p.stop:
            if s in tail:
                return {"type": "stop", "matched": s}
    if len(req.output_ids) >= p.max_new_tokens:
        return {"type": "length", "length": p.max_new_tokens}
    if req.seq_len >= context_length:
        return {"type": "length", "length": len(req.output_ids)}
    return None


def build_output(reqs: list[Req]) -> BatchTokenIDOut | None:
    """Collect the unsent tokens of every request that has some (or just finished)."""
    out = BatchTokenIDOut([], [], [], [], [], [], [], [], [], [])
    for r in reqs:
        if not r.pending and r.finished_reason is None:
            continue
        out.rids.append(r.rid)
        out.new_token_ids.append(r.pending)
        out.finished_reasons.append(r.finished_reason)
        out.prompt_tokens.append(len(r.origin_input_ids))
        out.completion_tokens.append(len(r.output_ids))
        out.cached_tokens.append(r.cached_tokens)
        out.logprobs.append(r.pending_logprobs)
        out.skip_special_tokens.append(r.params.skip_special_tokens)
        out.stop_strings.append(list(r.params.stop))
        out.input_logprobs.append(None if r.input_lp_sent or r.input_lp_from is None else r.input_logprobs)
        r.input_lp_sent = r.input_lp_sent or r.input_lp_from is not None
        out.spec.append(None if r.spec is None else r.spec.meta(len(r.output_ids)))
        r.pending, r.pending_logprobs = [], []
    return out if out.rids else None
