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


# a request that does not stream still sends its tokens every this many (upstream's DEFAULT_FORCE_STREAM_INTERVAL),
# so that the serving processes' work for a long answer does not all fall at its end
FORCE_STREAM_INTERVAL = 50


def due(req: Req, stream_interval: int = 1) -> bool:
    """Whether ``req``'s unsent tokens go out now: when it finished; a streaming request its first token at once,
    then every ``stream_interval`` tokens (``--stream-interval``); any other every ``FORCE_STREAM_INTERVAL``. Each
    message costs the detokenizer and the tokenizer manager a wake-up, CPU a step on two cores otherwise takes."""
    if req.finished_reason is not None:
        return True
    n = len(req.pending)
    if not n:
        return False
    if req.stream:
        return n >= stream_interval or n == len(req.output_ids)
    return n >= FORCE_STREAM_INTERVAL


def build_output(reqs: list[Req], stream_interval: int = 1) -> BatchTokenIDOut | None:
    """Collect the unsent tokens of every request that is ``due`` (a finished one always)."""
    out = BatchTokenIDOut([], [], [], [], [], [], [], [], [], [])
    for r in reqs:
        if not due(r, stream_interval):
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
