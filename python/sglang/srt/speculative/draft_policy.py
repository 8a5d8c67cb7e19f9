"""How many tokens a request drafts each step: the measured cost of a verify row against its acceptance.

A verify forward over ``1 + k`` rows of one request costs ``T(1) * C(1 + k)``, ``C`` measured per width and
CPU kernel family (``VERIFY_COSTS_BY_FAMILY``: the verify step's own cost, an extend forward with every row's logits, and the rows it adds
while each weight block streams once for all of them); with a per-position acceptance ``a`` it emits
``E(k) = 1 + a + .. + a^k`` tokens on average. Each step picks the ``k`` that maximises
``E(k) / C(1 + k)`` (1 for ``k = 0``: the decode step), from an acceptance estimate that decays towards recent steps; ``k = 0``
(no match, or acceptance too low) runs the ordinary decode step: nothing extra is verified. A request at
``k = 0`` still probes one draft every ``PROBE_EVERY`` steps, so its estimate can recover.

Past the compute knee a batch is no longer bound by streaming weights, and every verified row costs a
whole row of compute: a batch speculates only while ``batch + drafted rows <= COMPUTE_KNEE``, so at
``COMPUTE_KNEE`` running requests speculation is off.
"""

from __future__ import annotations

import functools

from sglang.utils.env import env_number

# A TARGET_VERIFY forward of ``rows`` rows costs VERIFY_COSTS_BY_FAMILY[family][rows] decode rows, per CPU kernel family (the
# one ``cpu_kernels/isa.py`` picks: the products' cost per extra row is the family's dot-product throughput), from
# bench/spec_cost.py --rounds 15 (default model, one request with 300 cached tokens, fastest of 15 rounds) with the
# family's default mixed16 arithmetic. Between the measured widths the cost is interpolated, past the last one
# extended at its last slope. A faster decode row makes each extra row dearer in its units.
# avx512_vnni: the 2-core AVX-512 EPYC with float16 weight scales and huge pages, after the one-region step and the
# int8 LM head (docs/benchmarks.md, "a fourth session"), the median of four runs (they spread by 10-20%): the
# integer kernels stream each weight block once for several rows, so an extra row costs 0.1-0.3 of a decode row;
# the step from 4 to 5 rows is the int16 kernels': compute-bound from 4 rows, with a second pass over each weight
# block past 4 rows. avx2: the 2-core AVX2-only EPYC (its vpmaddubsw / vpmaddwd products are compute-bound even at
# one row in cache, so each row adds its own multiply-adds: 0.29-0.41 of a decode row, spec_cost's "per extra
# row", in the runs below), with the head in the one-region step, the lean int8/int16 kernels (8 rows a weight
# block) and the vectorized softmax, the mean of two runs (within 3-9% of each other; the run before those two
# changes: 1.47 / 2.20 / 3.91 / 7.34 at 2 / 4 / 8 / 16). Two runs of the final kernels (the Q4 mins' term in a
# second pass, the wide shape's bits) read 1.06 / 1.44 / 1.76 / 2.01 / 2.37 / 2.69 / 3.39 / 4.20 / 4.91 / 6.24:
# the same table within 5%. The table below: the mean of two runs after a request's verify rows read its K/V once
# (attention units) and SiLU was vectorized (the two runs within 6%; against the table before them 1% cheaper at one
# row, 4% at two, 8-13% from three).
VERIFY_COSTS_BY_FAMILY: dict[str, tuple[tuple[int, float], ...]] = {
    "avx512_vnni": ((1, 1.08), (2, 1.17), (3, 1.41), (4, 1.59), (5, 2.12), (6, 2.49), (8, 2.92), (10, 3.64), (12, 4.32),
                    (16, 5.42)),
    "avx2": ((1, 1.04), (2, 1.32), (3, 1.57), (4, 1.77), (5, 2.05), (6, 2.36), (8, 2.95), (10, 3.75), (12, 4.32), (16, 5.49)),
}
# a family with no table of its own (none built now), or a host without one: the dearer rows, which draft less
FALLBACK_FAMILY = "avx2"
VERIFY_BASE_COST = 1.08  # the linear summary of avx512_vnni's table: the 1-row verify against the decode row
VERIFY_ROW_COST = 0.29  # and each extra row, on average
COMPUTE_KNEE = env_number("SGLANG_SPEC_COMPUTE_KNEE", 6, int, minimum=1)
PROBE_EVERY = 8
_DECAY = 0.7


def expected_tokens(a: float, k: int) -> float:
    """Tokens one verify of ``k`` drafts emits on average when each draft is accepted with probability ``a``."""
    return sum(a**i for i in range(k + 1))


@functools.lru_cache(maxsize=1)
def _host_family() -> str:
    from sglang.srt.layers.cpu_kernels.isa import IsaError, host_choice

    try:
        return host_choice().family.name
    except IsaError:  # no family runs here: the fused step is off, and the eager rows are no cheaper
        return FALLBACK_FAMILY


def verify_costs(family: str | None = None) -> tuple[tuple[int, float], ...]:
    """The (rows, cost in decode rows) table of kernel family ``family`` (None: this host's, as the CPU kernels
    pick it; ``SGLANG_CPU_ISA`` included), or the fallback's where the family has none."""
    fam = _host_family() if family is None else family
    return VERIFY_COSTS_BY_FAMILY.get(fam, VERIFY_COSTS_BY_FAMILY[FALLBACK_FAMILY])


def verify_cost(rows: int, family: str | None = None) -> float:
    """A verify forward of ``rows`` rows in decode rows (``verify_costs(family)``, interpolated)."""
    pts = verify_costs(family)
    for (r0, c0), (r1, c1) in zip(pts, pts[1:]):
        if rows <= r1 or (r1, c1) == pts[-1]:
            return c0 + (c1 - c0) * (rows - r0) / (r1 - r0)
    return pts[0][1]


def best_k(a: float, k_max: int, row_cost: float | None = None, base_cost: float | None = None, family: str | None = None) -> int:
    """The draft length maximising tokens per unit of step time (0: do not speculate): against the measured
    ``verify_cost`` of ``1 + k`` rows (kernel family ``family``; None: this host's), or the linear
    ``base_cost + row_cost * k`` where either is given."""
    linear = row_cost is not None or base_cost is not None
    row = VERIFY_ROW_COST if row_cost is None else row_cost
    base = VERIFY_BASE_COST if base_cost is None else base_cost
    best, best_rate = 0, 1.0
    for k in range(1, k_max + 1):
        rate = expected_tokens(a, k) / (base + row * k if linear else verify_cost(1 + k, family))
        if rate > best_rate * 1.0001:
            best, best_rate = k, rate
    return best


# The n-gram drafts' acceptance by the length of the match they continue (NGRAM). Measured on the default model
# (bench/speculative.py's twelve prompts, greedy, mixed16): a draft after a 1-token match was accepted 11-23% of the
# time, after 2 tokens 46-75%, after 3-4 about 60%, after 5-8 73-94%, after 9 or more 85-100%. A 1-token match
# is mostly a common word's latest successor, so verifying it costs more rows than it earns. These are the
# priors (min match length, per-position acceptance) of the estimate each speculator then keeps.
MATCH_PRIOR: tuple[tuple[int, float], ...] = ((1, 0.2), (2, 0.5), (3, 0.6), (5, 0.8), (9, 0.9))
_PRIOR_WEIGHT = 4.0  # positions the prior counts for
_MATCH_DECAY = 0.9


class MatchAcceptance:
    """Per-position acceptance of drafts by the length of their match, over every request of one speculator:
    decayed accepted over decayed tried positions per bucket of ``MATCH_PRIOR``. Owned by the speculator."""

    def __init__(self) -> None:
        self.succ = [a * _PRIOR_WEIGHT for _, a in MATCH_PRIOR]
        self.tried = [_PRIOR_WEIGHT] * len(MATCH_PRIOR)

    @staticmethod
    def bucket(n: int) -> int:
        return max(i for i, (lo, _) in enumerate(MATCH_PRIOR) if n >= lo or i == 0)

    def rate(self, n: int) -> float:
        b = self.bucket(n)
        return self.succ[b] / self.tried[b]

    def update(self, n: int, proposed: int, accepted: int) -> None:
        if proposed <= 0:
            return
        b = self.bucket(n)
        self.succ[b] = self.succ[b] * _MATCH_DECAY + accepted
        self.tried[b] = self.tried[b] * _MATCH_DECAY + min(accepted + 1, proposed)


class DraftState:
    """One request's acceptance estimate: decayed accepted drafts over decayed tried positions."""

    __slots__ = ("idle", "succ", "tried")

    def __init__(self) -> None:
        self.succ, self.tried = 1.2, 2.0  # prior 0.6: optimistic enough to try a first match
        self.idle = 0

    @property
    def rate(self) -> float:
        return self.succ / self.tried

    def want(self, k_max: int, match_rate: float | None = None) -> int:
        """Drafts to ask for this step (before the match and the batch budget cut it). ``match_rate``: the
        acceptance drafts after this step's match have had (``MatchAcceptance``), weighed equally with this
        request's own (their geometric mean): how long the match is and how well the request follows its drafts."""
        a = self.rate if match_rate is None else (self.rate * match_rate) ** 0.5
        k = best_k(a, k_max)
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
