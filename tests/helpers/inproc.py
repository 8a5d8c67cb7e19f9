"""Driving a scheduler built in this process (no ZMQ): greedy generation to completion."""

from __future__ import annotations

import itertools
from typing import Any

_rid = itertools.count()


def generate_ids(s: Any, prompts: list[list[int]], n: int) -> list[list[int]]:
    """Greedy, EOS ignored: ``n`` tokens for each prompt (token ids), batched; the prefix cache is reset after."""
    from sglang.srt.managers.io_struct import BatchTokenIDOut, TokenizedGenerateReqInput

    rids = [f"in{next(_rid)}" for _ in prompts]
    for rid, ids in zip(rids, prompts):
        s.add_request(TokenizedGenerateReqInput(rid, ids, {"temperature": 0, "max_new_tokens": n, "ignore_eos": True}))
    while s.has_work():
        s.step()
    out: dict[str, list[int]] = {r: [] for r in rids}
    for o in s.outbox:
        if isinstance(o, BatchTokenIDOut):
            for rid, ids in zip(o.rids, o.new_token_ids):
                out[rid] += ids
    s.outbox.clear()
    if s.tree is not None:
        s.tree.reset()
    return [out[r] for r in rids]
