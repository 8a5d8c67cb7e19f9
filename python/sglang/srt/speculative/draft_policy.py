"""How many tokens a request drafts each step: the measured cost of a verify row against its acceptance.

A verify forward over ``1 + k`` rows of one request costs ``T(1) * (c + r * k)``: ``c``, the verify step's
own cost (an extend forward, every row's logits) against a decode step's, and ``r`` per drafted row, while
each weight block streams once for all rows; with a per-position acceptance ``a`` it emits
``E(k) = 1 + a + .. + a^k`` tokens on average. Each step picks the ``k`` that maximises
``E(k) / (c + r k)`` (1 for ``k = 0``: the decode step), from an acceptance estimate that decays towards recent steps; ``k = 0``
(no match, or acceptance too low) runs the ordinary decode step: nothing extra is verified. A request at
``k = 0`` still probes one draft every ``PROBE_EVERY`` steps, so its estimate can recover.

Past the compute knee a batch is no longer bound by streaming weights, and every verified row costs a
whole row of compute: a batch speculates only while ``batch + drafted rows <= COMPUTE_KNEE``, so at
``COMPUTE_KNEE`` running requests speculation is off.
"""

from __future__ import annotations

from sglang.utils.env import env_number

# bench/spec_cost.py --rounds 15 (default model, one request with 300 cached tokens, fastest of 15 rounds) on the
# quiet 2-core AVX-512 EPYC (docs/benchmarks.md, "Speculative decoding"): one decode row 8.58 ms; a TARGET_VERIFY
# forward of 1 + k rows cost 1.03 decode rows at k = 0 and 0.22-0.38 of a decode row per extra row (0.27 on
# average over k = 1..15); a DECODE batch of M rows costs about the same as a verify of M rows (the float32
# arithmetic on the Q4 blocks makes each row cost compute, not only the weights' streaming).
VERIFY_BASE_COST = 1.03  # the 1-row verify against the decode row (same request, same tokens)
VERIFY_ROW_COST = 0.27
COMPUTE_KNEE = env_number("SGLANG_SPEC_COMPUTE_KNEE", 6, int, minimum=1)
PROBE_EVERY = 8
_DECAY = 0.7


def expected_tokens(a: float, k: int) -> float:
    """Tokens one verify of ``k`` drafts emits on average when each draft is accepted with probability ``a``."""
    return sum(a**i for i in range(k + 1))


def best_k(a: float, k_max: int, row_cost: float = VERIFY_ROW_COST, base_cost: float = VERIFY_BASE_COST) -> int:
    """The draft length maximising tokens per unit of step time (0: do not speculate)."""
    best, best_rate = 0, 1.0
    for k in range(1, k_max + 1):
        rate = expected_tokens(a, k) / (base_cost + row_cost * k)
        if rate > best_rate * 1.0001:
            best, best_rate = k, rate
    return best


class DraftState:
    """One request's acceptance estimate: decayed accepted drafts over decayed tried positions."""

    __slots__ = ("idle", "succ", "tried")

    def __init__(self) -> None:
        self.succ, self.tried = 1.2, 2.0  # prior 0.6: optimistic enough to try a first match
        self.idle = 0

    @property
    def rate(self) -> float:
        return self.succ / self.tried

    def want(self, k_max: int) -> int:
        """Drafts to ask for this step (before the match and the batch budget cut it)."""
        k = best_k(self.rate, k_max)
        if k == 0:
            self.idle += 1
            if self.idle >= PROBE_EVERY:
                self.idle = 0
                return 1
        return k

    def update(self, proposed: int, accepted: int) -> None:
        """After a verify: ``accepted`` of ``proposed`` drafts; positions after the first rejection were not tried."""
        if proposed <= 0:
            return
        tried = min(accepted + 1, proposed)
        self.succ = self.succ * _DECAY + accepted
        self.tried = self.tried * _DECAY + tried


def fit_budget(wants: list[int], batch: int, knee: int = COMPUTE_KNEE) -> list[int]:
    """Cut the drafts so that ``batch + sum(drafts) <= knee``, longest first; all zero when the batch is at the knee."""
    ks = list(wants)
    budget = knee - batch
    if budget <= 0:
        return [0] * len(ks)
    while sum(ks) > budget:
        i = max(range(len(ks)), key=lambda j: ks[j])
        ks[i] -= 1
    return ks
