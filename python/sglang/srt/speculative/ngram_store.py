"""A shared n-gram store over every request's prompt and committed output: the source of NGRAM drafts.

Unlike upstream's trie (fed with the last ``max_trie_depth`` tokens after each verify), the whole prompt
body is indexed too, as vLLM's prompt lookup does: that is what drafts summaries, answers grounded in a
given document and code edits. One entry per n-gram (``n`` in a few window sizes between the min and max
match windows) points at the sequence and position of its latest occurrence and counts the tokens that
followed it; drafts are the continuation of the longest matching suffix (``BFS``: the most recent
occurrence, as upstream's recency order) or the most frequent successor chained token by token (``PROB``).

Not thread-safe: the scheduler owns it. Pure Python, no torch: unit-tested without a model.
"""

from __future__ import annotations

from sglang.utils.env import env_number

# An entry costs about 400 bytes in Python (the key tuple, the entry, its successor counts and their dict
# slots: measured with tracemalloc over 640k entries), so upstream's default capacity of 10M trie nodes
# would be about 4 GB here; the store also stays under this many MiB (SGLANG_SPEC_NGRAM_MAX_MB).
ENTRY_BYTES = 400
MAX_MB = env_number("SGLANG_SPEC_NGRAM_MAX_MB", 256, int, minimum=1)

_WINDOWS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)


class _Entry:
    __slots__ = ("next", "pos", "seq")

    def __init__(self, seq: list[int], pos: int) -> None:
        self.seq, self.pos = seq, pos
        self.next: dict[int, int] = {}


class NgramStore:
    """Invariant: an entry ``key -> (seq, pos)`` has ``seq[pos - len(key) : pos] == key`` and ``pos < len(seq)``."""

    def __init__(self, min_window: int = 1, max_window: int = 12, max_depth: int = 18, capacity: int = 10_000_000,
                 match_type: str = "BFS", max_mb: int | None = None) -> None:
        if not 1 <= min_window <= max_window:
            raise ValueError(f"match windows must satisfy 1 <= min ({min_window}) <= max ({max_window})")
        # a few sizes, not every one: each indexed size costs a dict write per token
        self.windows = sorted({w for w in _WINDOWS if min_window <= w <= max_window} | {min_window, max_window})
        budget = (MAX_MB if max_mb is None else max_mb) * 2**20 // ENTRY_BYTES
        # ``--speculative-ngram-capacity`` entries, or fewer where the memory budget says so
        self.max_depth, self.capacity, self.match_type = max_depth, max(1, min(capacity, budget)), match_type
        self.entries: dict[tuple[int, ...], _Entry] = {}  # insertion order = write order (eviction)
        self.seqs: dict[str, list[int]] = {}  # live requests: their tokens so far

    def __len__(self) -> int:
        return len(self.entries)

    def add(self, rid: str, tokens: list[int]) -> None:
        """Start indexing request ``rid`` with ``tokens`` (its prompt, and any output so far)."""
        seq: list[int] = []
        self.seqs[rid] = seq
        self.extend(rid, tokens)

    def extend(self, rid: str, tokens: list[int]) -> None:
        """Append committed ``tokens`` to ``rid``'s sequence and index the n-grams they complete."""
        seq = self.seqs[rid]
        entries, windows = self.entries, self.windows
        for t in tokens:
            pos = len(seq)
            seq.append(t)
            for n in windows:
                if n > pos:
                    break
                key = tuple(seq[pos - n : pos])
                e = entries.pop(key, None)  # re-inserted: the most recently written entry is last
                if e is None:
                    e = _Entry(seq, pos)
                else:
                    e.seq, e.pos = seq, pos
                e.next[t] = e.next.get(t, 0) + 1
                entries[key] = e
        while len(entries) > self.capacity:
            del entries[next(iter(entries))]

    def finish(self, rid: str) -> None:
        """``rid`` ended: its n-grams stay (other requests draft from them), its handle goes."""
        self.seqs.pop(rid, None)

    def clear(self) -> None:
        self.entries.clear()
        self.seqs.clear()

    def _longest(self, context: list[int]) -> _Entry | None:
        return self._match(context)[0]

    def _match(self, context: list[int]) -> tuple[_Entry | None, int]:
        """The entry of the longest indexed window ending ``context``, and that window's length (0: none)."""
        for n in reversed(self.windows):
            if n <= len(context):
                e = self.entries.get(tuple(context[-n:]))
                if e is not None:
                    return e, n
        return None, 0

    def match_length(self, rid: str) -> int:
        """The length of the longest indexed window that ends ``rid``'s sequence and occurred before (0: none)."""
        seq = self.seqs.get(rid)
        return self._match(seq)[1] if seq else 0

    def draft(self, rid: str, k: int) -> list[int]:
        """Up to ``min(k, max_depth)`` tokens likely to follow ``rid``'s sequence; empty when nothing matches."""
        k = min(k, self.max_depth)
        seq = self.seqs.get(rid)
        if not seq or k <= 0:
            return []
        if self.match_type == "PROB":
            ctx, out = seq[-self.windows[-1] :], []
            while len(out) < k:
                e = self._longest(ctx)
                if e is None:
                    break
                t = max(e.next.items(), key=lambda kv: kv[1])[0]
                out.append(t)
                ctx.append(t)
            return out
        e = self._longest(seq)
        return [] if e is None else e.seq[e.pos : e.pos + k]
