"""The OpenAI ``logprobs`` objects, for whole answers and for each chunk of a stream.

``pairs`` are the engine's per-token ``(logprob, [(token id, logprob), ...])`` (``ReqState.logprobs``);
``token_str`` turns one id into its text (special tokens kept).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

TokenStr = Callable[[int], str]
Pair = tuple[float, list[tuple[int, float]]]


def chat_logprobs(token_str: TokenStr, ids: list[int], pairs: list[Pair]) -> dict[str, Any]:
    """Chat's ``{"content": [{token, logprob, bytes, top_logprobs}, ...]}`` for ``ids``."""
    def item(t: int, v: float) -> dict[str, Any]:
        s = token_str(t)
        return {"token": s, "logprob": v, "bytes": list(s.encode())}

    return {"content": [{**item(t, v), "top_logprobs": [item(a, b) for a, b in top]} for t, (v, top) in zip(ids, pairs)]}


def completion_logprobs(token_str: TokenStr, ids: list[int], pairs: list[Pair], offset: int = 0,
                        prompt: tuple[list[int], list[Pair]] | None = None) -> tuple[dict[str, Any], int]:
    """The legacy completions object ``{tokens, token_logprobs, top_logprobs, text_offset}`` for ``ids`` whose first
    token starts at character ``offset`` of the choice's text, and the offset after them. ``prompt``: the echoed
    prompt's ids and the log-probabilities of all but its first token, which lead (the first with ``null``)."""
    toks = [token_str(t) for t in ids]
    lps: list[float | None] = [x for x, _ in pairs]
    tops: list[dict[str, float] | None] = [{token_str(t): v for t, v in top} for _, top in pairs]
    if prompt is not None:
        pids, given = prompt
        toks = [token_str(t) for t in pids] + toks
        lps = [None, *(x for x, _ in given)] + lps
        tops = [None, *({token_str(t): v for t, v in top} for _, top in given)] + tops
    offsets = []
    for t in toks:
        offsets.append(offset)
        offset += len(t)
    return {"tokens": toks, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets}, offset
