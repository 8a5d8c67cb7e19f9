"""How many tokens a request drafts each step: the measured cost of a verify row against its acceptance.

A verify forward over ``1 + k`` rows of one request costs ``T(1) * C(1 + k)``, ``C`` measured per width, CPU
kernel family and CPU model (``VERIFY_COSTS_BY_FAMILY``: the verify step's own cost, an extend forward with every
row's logits, and the rows it adds while each weight block streams once for all of them); with a per-position acceptance ``a`` it emits
``E(k) = 1 + a + .. + a^k`` tokens on average. Each step picks the ``k`` that maximises
``E(k) / C(1 + k)`` (1 for ``k = 0``: the decode step; ``C`` the table in force, which a speculator calibrates live:
``cost_meter.VerifyCostMeter``), from an acceptance estimate that decays towards recent steps; ``k = 0``
(no match, or acceptance too low) runs the ordinary decode step: nothing extra is verified. A request at
``k = 0`` still probes one draft every ``probe_every()`` steps (at least ``PROBE_EVERY``, further apart where a
2-row verify is dear: ``PROBE_BUDGET``), so its estimate can recover.

Past the compute knee a batch is no longer bound by streaming weights, and every verified row costs a
whole row of compute: a batch speculates only while ``batch + drafted rows <= COMPUTE_KNEE``, so at
``COMPUTE_KNEE`` running requests speculation is off.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from sglang.utils.env import env_number


@dataclass(frozen=True)
class VerifyCosts:
    """What a TARGET_VERIFY forward of ``rows`` rows costs, in decode rows, on one CPU model (``cpu``: as
    ``sglang.host.cpu_model()`` names it): (rows, cost) with rows ascending, from ``bench/spec_cost.py --rounds
    15`` (the default model, one request with 300 cached tokens, the fastest of 15 rounds; the mean or median of
    several runs, docs/benchmarks.md)."""

    cpu: str
    rows: tuple[tuple[int, float], ...]


# Per CPU kernel family (the one ``cpu_kernels/isa.py`` picks), one table per CPU model measured, chosen by
# ``isa.for_cpu`` (the model's own, else the family's first). The extra rows' cost is the products' dot-product
# throughput: on AVX-512 VNNI the integer kernels stream each weight block once for several rows (0.1-0.3 of a decode
# row each, with a step from 4 to 5 rows where the int16 kernels take a second pass); on AVX2 the vpmaddubsw /
# vpmaddwd products are compute-bound even at one row, so each row adds its own multiply-adds: 0.24-0.30 of a
# decode row on average on the Zen 2 EPYC, 0.6 on the Zen 1 one (its 256-bit operations run as two
# 128-bit halves; 0.37-0.53 before its one-row weight prefetch made the decode row faster).
# docs/benchmarks.md, "Speculative decoding", has the runs. A faster decode row makes each extra row dearer in its
# units, so the tables are re-measured whenever the decode step changes.
VERIFY_COSTS_BY_FAMILY: dict[str, tuple[VerifyCosts, ...]] = {
    # the AMX Xeon, its default plan (int16 up to 8 rows, bf16 above; weight prefetch 4096 bytes ahead), int16 products
    # of 5-8 rows in one 512-bit pass, passes of up to 8 rows prefetching their weights. 2-8 rows as the server pays them
    # (bench/spec_flow_cost.py, three runs, one with SGLANG_SPEC_COMPUTE_KNEE=9 for 8 rows; 5 between 4 and 6): 8-15%
    # dearer than bench/spec_cost.py --rounds 15 prices them back to back (1.18 / 1.34 / 1.52 / 1.98 / 2.25 at 2 / 3 /
    # 4 / 6 / 8 rows), whose 1 and 10-16 rows these are (10+ rows run the bf16 arithmetic's GEMM; the knee keeps a
    # verify under them). Before the multi-row prefetch 4 / 8 rows cost 2.00 / 2.59, before the tiles 2.73 / 3.57. Three
    # more runs with the 512-bit pass read 6 / 8 rows 2.11-2.43 / 2.56: the same within the runs' spread
    "amx": (VerifyCosts("Intel(R) Xeon(R) Processor (family 6 model 167)", (
        (1, 1.11), (2, 1.27), (3, 1.48), (4, 1.68), (5, 1.99), (6, 2.30), (8, 2.50), (10, 4.37), (12, 4.40), (16, 4.75))),),
    # the Zen 4 EPYC (family 25 model 17), re-measured 2026-12-07 (evening) after the integer products read their
    # activations by the instruction's broadcast (a plain decode step 2.76-2.79 ms as the server pays it, against about 3.1 before):
    # 2 / 3 / 4 / 6 rows as the server pays them (bench/spec_flow_cost.py, two runs: 1.20-1.21 / 1.36-1.37 / 1.59 /
    # 2.16-2.17; 5 rows, not drafted there, between 4 and 6). 1 row and 8-16 the medians of four bench/spec_cost.py
    # --rounds 15 runs of that morning (8 rows 2.60-3.34: this VM's speed moves within minutes). The table before
    # read 1.18 / 1.30 / 1.47 / 1.79 / 2.00 at 2-6 rows: the decode row got cheaper, the extra rows less so
    "avx512_vnni": (VerifyCosts("AMD EPYC (family 25 model 17)", (
        (1, 1.11), (2, 1.21), (3, 1.37), (4, 1.59), (5, 1.88), (6, 2.17), (8, 2.86), (10, 3.52), (12, 4.16), (16, 5.54))),),
    "avx2": (
        VerifyCosts("AMD EPYC (family 23 model 49)", (
            (1, 1.04), (2, 1.32), (3, 1.57), (4, 1.77), (5, 2.05), (6, 2.36), (8, 2.95), (10, 3.75), (12, 4.32), (16, 5.49))),
        # the Zen 3 EPYC (family 25 model 1), its weight prefetch (2048 bytes ahead, passes of up to 2 rows) and the lean
        # groups' register pins: 2-6 rows as the server pays them (bench/spec_flow_cost.py, two runs: 1.34-1.37 / 1.86 /
        # 2.37-2.50 / 2.47-2.89 / 3.20-3.23; 3 and 5 rows drafted a few times only), 1 and 8-16 rows the medians of four
        # bench/spec_cost.py --rounds 15 runs (back to back: 2 / 4 / 6 rows 1.26-1.60 / 1.99-2.23 / 2.54-3.11). Its decode
        # row runs near the bandwidth while each extra row adds compute-bound multiply-adds: 0.3-0.5 of a decode row
        VerifyCosts("AMD EPYC (family 25 model 1)", (
            (1, 1.10), (2, 1.36), (3, 1.88), (4, 2.40), (5, 2.75), (6, 3.22), (8, 3.41), (10, 4.45), (12, 5.21), (16, 6.52))),
        # the Zen 1 EPYC (family 23 model 1), re-measured 2026-12-07 after the step's redo and the batch-invariant attention
        # made its decode row faster (6.4-7.8 ms against 8.4): 2 / 3 / 4 / 6 rows as the server pays them
        # (bench/spec_flow_cost.py: 1.68 / 2.47 / 2.83 / 4.11), the rest the mean of two bench/spec_cost.py --rounds 15
        # runs (1.63-1.67 / 2.20-2.27 / 2.67-2.77 / 4.00 at those widths). Each extra row 0.6 of a decode row: the
        # products are compute-bound at one row here. The table of 2026-12-05 read 1.56 / 2.17 / 2.65 / 3.87
        VerifyCosts("AMD EPYC (family 23 model 1)", (
            (1, 1.04), (2, 1.66), (3, 2.31), (4, 2.76), (5, 3.35), (6, 4.04), (8, 5.35), (10, 6.36), (12, 7.72), (16, 10.31))),
    ),
}
# a family with no table of its own (none built now), or a host without one: the avx2 family's tables
FALLBACK_FAMILY = "avx2"
VERIFY_BASE_COST = 1.11  # the linear summary of avx512_vnni's table: the 1-row verify against the decode row
VERIFY_ROW_COST = 0.30  # and each extra row, on average
# a draft length is taken only where its modelled tokens per decode row beat the plain step's 1 by this factor (on
# the Zen 4 EPYC a 2-row verify cost 1.17-1.18 decode rows when this was set, so a 1-token match's 20% acceptance modelled a 1.7% gain)
MIN_GAIN = 1.02
COMPUTE_KNEE = env_number("SGLANG_SPEC_COMPUTE_KNEE", 6, int, minimum=1)
PROBE_EVERY = 8  # steps between probes, at least
# what the probes of a request at k = 0 may cost, in decode rows a step: a probe is a 2-row verify whose draft mostly
# fails (it probes because its estimate says drafts do not pay), C(2) - 1 rows spent for little. On the Zen 1 EPYC a
# 2-row verify is 1.66 decode rows, and one probe every 8 steps cost open chat 2.6% of its decode (bench/spec_replay.py:
# 0.974x -> 0.989x at one every 33, input-grounded 1.09x -> 1.12x); on the Zen 4 EPYC (1.21) the interval is 11
PROBE_BUDGET = 0.02
_DECAY = 0.7


def expected_tokens(a: float, k: int) -> float:
    """Tokens one verify of ``k`` drafts emits on average when each draft is accepted with probability ``a``."""
    return sum(a**i for i in range(k + 1))


@functools.lru_cache(maxsize=1)
def _host() -> tuple[str, str]:
    """(kernel family, CPU model) of this host, as the CPU kernels decide them."""
    from sglang.host import cpu_model
    from sglang.srt.layers.cpu_kernels.isa import IsaError, host_choice

    try:
        family = host_choice().family.name
    except IsaError:  # no family runs here: the fused step is off, and the eager rows are no cheaper
        family = FALLBACK_FAMILY
    return family, cpu_model()


def verify_costs(family: str | None = None, cpu: str | None = None) -> tuple[tuple[int, float], ...]:
    """The (rows, cost in decode rows) table of kernel family ``family`` on CPU model ``cpu``, by ``isa.for_cpu``
    (the model's own table, else the family's first), the fallback family's where the family has none. None
    stands for this host's family / CPU model (as the CPU kernels pick them, ``SGLANG_CPU_ISA`` included); with a
    ``family`` given and ``cpu`` None the family's first table (a host-independent figure)."""
    from sglang.srt.layers.cpu_kernels.isa import for_cpu

    if family is None:
        family, host_cpu = _host()
        cpu = cpu or host_cpu
    runs = VERIFY_COSTS_BY_FAMILY.get(family) or VERIFY_COSTS_BY_FAMILY[FALLBACK_FAMILY]
    found = for_cpu(runs, cpu or "")
    assert found is not None  # every family's tuple is non-empty
    return found.rows


def verify_cost(rows: int, family: str | None = None, cpu: str | None = None) -> float:
    """A verify forward of ``rows`` rows in decode rows (``verify_costs(family, cpu)``, interpolated)."""
    return _interpolate(verify_costs(family, cpu), rows)


def _interpolate(pts: tuple[tuple[int, float], ...], rows: int) -> float:
    for (r0, c0), (r1, c1) in zip(pts, pts[1:]):
        if rows <= r1 or (r1, c1) == pts[-1]:
            return c0 + (c1 - c0) * (rows - r0) / (r1 - r0)
    return pts[0][1]


def best_k(a: float, k_max: int, row_cost: float | None = None, base_cost: float | None = None, family: str | None = None,
           cpu: str | None = None, table: tuple[tuple[int, float], ...] | None = None) -> int:
    """The draft length maximising tokens per unit of step time (0: do not speculate): against the measured
    ``verify_cost`` of ``1 + k`` rows (``table``, the (rows, cost) pairs in force, e.g. a speculator's
    ``VerifyCostMeter``'s; else kernel family ``family`` on CPU model ``cpu``, as ``verify_costs`` reads them: both
    None, this host's), or the linear ``base_cost + row_cost * k`` where either is given. Drafting must beat the
    plain decode step by ``MIN_GAIN``: a table's runs spread wider than the last percent a draft would earn."""
    if row_cost is not None or base_cost is not None:
        row = VERIFY_ROW_COST if row_cost is None else row_cost
        base = VERIFY_BASE_COST if base_cost is None else base_cost
        costs = tuple(base + row * k for k in range(k_max + 1))
    else:
        costs = _costs_up_to(table if table is not None else verify_costs(family, cpu), k_max)
    best, best_rate, tokens = 0, MIN_GAIN, 1.0
    for k in range(1, k_max + 1):
        tokens += a**k  # expected_tokens(a, k), summed in its order
        rate = tokens / costs[k]
        if rate > best_rate * 1.0001:
            best, best_rate = k, rate
    return best


def probe_every(family: str | None = None, cpu: str | None = None, table: tuple[tuple[int, float], ...] | None = None) -> int:
    """Steps between one request's probe drafts while its estimate says no draft pays: ``PROBE_EVERY``, or more where
    a probe's extra row (``verify_cost(2) - 1`` by ``table``, else family / CPU model as ``verify_costs`` reads them)
    would cost more than ``PROBE_BUDGET`` of a decode row a step. Read once a request (``DraftState``), or once a
    table (``CostTable``)."""
    two = _interpolate(table, 2) if table is not None else verify_cost(2, family, cpu)
    return max(PROBE_EVERY, math.ceil((two - 1.0) / PROBE_BUDGET))


@dataclass(frozen=True)
class CostTable:
    """The verify costs a speculator prices drafts by (``rows``: (rows, cost in decode rows), as
    ``VerifyCosts.rows``) and the probe interval they imply (``every``: ``probe_every`` of them), computed once a
    table so that ``DraftState.want`` reads both without a lookup."""

    rows: tuple[tuple[int, float], ...]
    every: int

    @staticmethod
    def of(rows: tuple[tuple[int, float], ...]) -> CostTable:
        return CostTable(rows, probe_every(table=rows))


@functools.lru_cache(maxsize=256)
def _costs_up_to(pts: tuple[tuple[int, float], ...], k_max: int) -> tuple[float, ...]:
    """``_interpolate(pts, 1 + k)`` for k = 0..k_max: ``best_k`` runs once a request a step, right after a step has
    flushed the caches, where interpolating the table for every k took 20-30 us of a 3.5 ms step (keyed by the
    table's contents: a table replaced in place is priced afresh)."""
    return tuple(_interpolate(pts, 1 + k) for k in range(k_max + 1))


# The n-gram drafts' acceptance by the length of the match they continue (NGRAM), the priors (min match length,
# per-position acceptance) of the estimate each speculator then keeps. Measured on the default model
# (bench/speculative.py's twelve prompts, greedy, mixed16), every position of the answers walked token by token: a
# draft after an unambiguous 1-token match was right 47% a position, after 2 tokens 70%, 3-4 86%, 5 or more 92%.
# (Before ambiguous matches had buckets of their own, a 1-token match's drafts were accepted 11-23% of the time:
# mostly a common word's latest successor, which costs more rows than it earns.)
MATCH_PRIOR: tuple[tuple[int, float], ...] = ((1, 0.45), (2, 0.65), (3, 0.8), (5, 0.9), (9, 0.92))
# An ambiguous match (its window has been followed by more than one token, ``NgramStore.anchor``) is its own bucket:
# every position of those answers walked token by token, a 1-token match's draft was right 9% a position when
# ambiguous (126 positions) against 41-59% when not (81), a 2-token one 33% (17) against 56-72% (75), 3 or more 50%
# (8) against 81-93% (512). Mixed in one bucket, the unambiguous 1-token matches were never drafted.
AMBIGUOUS_PRIOR: tuple[tuple[int, float], ...] = ((1, 0.1), (2, 0.35), (3, 0.5))
_PRIOR_WEIGHT = 4.0  # positions the prior counts for
_MATCH_DECAY = 0.9


class MatchAcceptance:
    """Per-position acceptance of drafts by the kind of their match (its length, whether it is ambiguous), over
    every request of one speculator: decayed accepted over decayed tried positions per bucket of ``MATCH_PRIOR``
    (unambiguous) and ``AMBIGUOUS_PRIOR``. Owned by the speculator."""

    def __init__(self) -> None:
        priors = MATCH_PRIOR + AMBIGUOUS_PRIOR
        self.succ = [a * _PRIOR_WEIGHT for _, a in priors]
        self.tried = [_PRIOR_WEIGHT] * len(priors)

    @staticmethod
    def bucket(n: int, ambiguous: bool = False) -> int:
        priors, first = (AMBIGUOUS_PRIOR, len(MATCH_PRIOR)) if ambiguous else (MATCH_PRIOR, 0)
        return first + max(i for i, (lo, _) in enumerate(priors) if n >= lo or i == 0)

    def rate(self, n: int, ambiguous: bool = False) -> float:
        b = self.bucket(n, ambiguous)
        return self.succ[b] / self.tried[b]

    def update(self, n: int, proposed: int, accepted: int, ambiguous: bool = False) -> None:
        if proposed <= 0:
            return
        b = self.bucket(n, ambiguous)
        self.succ[b] = self.succ[b] * _MATCH_DECAY + accepted
        self.tried[b] = self.tried[b] * _MATCH_DECAY + min(accepted + 1, proposed)


class DraftState:
    """One request's acceptance estimate: decayed accepted drafts over decayed tried positions."""

    __slots__ = ("every", "idle", "succ", "tried")

    def __init__(self) -> None:
        self.succ, self.tried = 1.2, 2.0  # prior 0.6: optimistic enough to try a first match
        self.idle = 0
        self.every = 0  # the host table's probe interval, read once (the lookup took 5 us a step) when first needed

    @property
    def rate(self) -> float:
        return self.succ / self.tried

    def want(self, k_max: int, match_rate: float | None = None, costs: CostTable | None = None) -> int:
        """Drafts to ask for this step (before the match and the batch budget cut it). ``match_rate``: the
        acceptance drafts after this step's kind of match have had (``MatchAcceptance``, NGRAM), which then decides
        alone; without one (a draft model's drafts) this request's own acceptance does. ``costs``: the verify costs in
        force (the speculator's ``VerifyCostMeter``: the host's table calibrated live); None: the host's table as
        measured (``verify_costs``), with the probe interval read when this state was made. Replayed on recorded answers
        (``bench/spec_replay.py``) the request's own estimate only lowered what the match's says: a request that
        paraphrases its document still copies whole phrases after long matches, and its estimate, decayed by the
        short matches' misses, turned those long matches down (the geometric mean of the two drafted for 1.37x /
        1.19x / 1.04x of the plain decode on copy-heavy / input-grounded / open chat, the match's alone 1.46x /
        1.28x / 1.06x on the AMX Xeon)."""
        a = self.rate if match_rate is None else match_rate
        k = best_k(a, k_max, table=None if costs is None else costs.rows)
        if k == 0:
            self.idle += 1
            if costs is None and not self.every:
                self.every = probe_every()  # a speculator passes its table's; only callers without one read the host's
            if self.idle >= (self.every if costs is None else costs.every):
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
