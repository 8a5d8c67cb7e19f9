"""A shared n-gram store over every request's prompt and committed output: the source of NGRAM drafts.

Unlike upstream's trie (fed with the last ``max_trie_depth`` tokens after each verify), the whole prompt
body is indexed too, as vLLM's prompt lookup does: that is what drafts summaries, answers grounded in a
given document and code edits. One entry per n-gram (``n`` in a few window sizes between the min and max
match windows) points at the sequence and position of its latest occurrence and counts the tokens that
followed it; drafts are the continuation of the longest matching suffix (``BFS``: the most recent
occurrence, as upstream's recency order) or the most frequent successor chained token by token (``PROB``).

An answer that copies its source with small edits (a comma added, a word renamed) breaks the longest match at
every edit, and the windows that end in the edit match nothing useful for a few tokens. So, where the longest
match is shorter than ``RESYNC_BELOW``, ``BFS`` looks behind the last two tokens: if the ``RESYNC_BELOW`` or more
tokens before them occurred before (the occurrence before the latest, which is this sequence's own) and the
tokens after that occurrence line up with the last two as one inserted, replaced or dropped token, the draft
continues the source from there (``anchor``). Upstream's trie and vLLM's prompt lookup have no such step.

Not thread-safe: the scheduler owns it. Pure Python, no torch: unit-tested without a model.
"""

from __future__ import annotations

from sglang.utils.env import env_number

# An entry costs about 418 bytes in Python (the key tuple, the entry, its successor counts and their dict
# slots, and the two of its previous occurrence: measured with tracemalloc over 640k entries), so
# upstream's default capacity of 10M trie nodes would be about 4 GB here; the store also stays under this many MiB
# (SGLANG_SPEC_NGRAM_MAX_MB).
ENTRY_BYTES = 418
MAX_MB = env_number("SGLANG_SPEC_NGRAM_MAX_MB", 256, int, minimum=1)

_WINDOWS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)
RESYNC_BELOW = 3  # a longest match this short looks for the source behind an edit (measured: 2 resynced nothing)


class _Entry:
    __slots__ = ("next", "pos", "prev_pos", "prev_seq", "seq")

    def __init__(self, seq: list[int], pos: int) -> None:
        self.seq, self.pos = seq, pos
        self.prev_seq: list[int] | None = None  # the occurrence before the latest (seq, pos), if any
        self.prev_pos = 0
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
                    e.prev_seq, e.prev_pos, e.seq, e.pos = e.seq, e.pos, seq, pos
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

    def anchor(self, seq: list[int]) -> tuple[list[int] | None, int, int, bool]:
        """Where ``seq``'s draft comes from: (source sequence, the draft's first position there, the match's length,
        whether it is ambiguous); (None, 0, 0, False) when nothing matches. The longest window ending ``seq``, or,
        when that is shorter than ``RESYNC_BELOW``, the source behind an edit in the last two tokens (module
        docstring). Ambiguous: that window has been followed by more than one token so far (the draft is its
        latest successor's); measured on the default model, a 1-token match drafts 9% right a position when
        ambiguous against 41-59% when not, a 2-token one 33% against 56-72% (``draft_policy.MATCH_PRIOR``)."""
        e, n = self._match(seq)
        if n < RESYNC_BELOW and len(seq) > RESYNC_BELOW + 2:
            found = self._resync(seq)
            if found is not None:
                return (*found, False)
        return (e.seq, e.pos, n, len(e.next) > 1) if e is not None else (None, 0, 0, False)

    def _resync(self, seq: list[int]) -> tuple[list[int], int, int] | None:
        # a window ending just before the last two tokens was last written when the first of them was appended:
        # that occurrence is this sequence's own, the one before it the source
        ctx, x, y = seq[:-2], seq[-2], seq[-1]
        for m in reversed(self.windows):
            if m < RESYNC_BELOW or m > len(ctx):
                continue
            e = self.entries.get(tuple(ctx[-m:]))
            if e is None:
                continue
            src, p = (e.prev_seq, e.prev_pos) if e.seq is seq and e.pos == len(ctx) else (e.seq, e.pos)
            if src is None:
                continue  # only this sequence's own occurrence
            # src[p] followed the window there
            if p + 1 < len(src) and src[p] == y:  # x inserted
                return src, p + 1, m
            if p + 2 < len(src) and src[p + 1] == y:  # src[p] replaced by x
                return src, p + 2, m
            if p + 3 < len(src) and src[p + 1] == x and src[p + 2] == y:  # src[p] dropped
                return src, p + 3, m
            return None  # the longest window that occurred before decides
        return None

    def match(self, rid: str) -> tuple[int, bool]:
        """(length, ambiguous) of the match ``rid``'s next draft continues (``anchor``; ``PROB``: the longest window);
        (0, False): none."""
        seq = self.seqs.get(rid)
        if not seq:
            return 0, False
        if self.match_type == "PROB":
            e, n = self._match(seq)
            return n, e is not None and len(e.next) > 1
        return self.anchor(seq)[2:]

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
        src, p, _, _ = self.anchor(seq)
        if src is None:
            return []
        out = src[p : p + k]
        if src is seq:  # the match's latest occurrence is this sequence's own: a repeating span
            # continues into its own draft (a period of 3 tokens drafts k, not the 3 before the present)
            while len(out) < k and p + len(out) - len(seq) < len(out):
                out.append(out[p + len(out) - len(seq)])
        return out
