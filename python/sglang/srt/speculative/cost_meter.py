"""What verify steps cost on this server, measured while it serves: the draft policy's table calibrated live.

``draft_policy``'s tables were measured per CPU model, on the default model, in one spell of one VM. What a verify's
extra rows cost against a plain decode step moves with all three: a larger model streams more weight bytes a row, so
its extra rows are relatively cheaper; this VM's spells move the DRAM bandwidth by 1.5x while the arithmetic stays
put (on the Zen 4 EPYC the same kernels priced 4 rows at 1.59 decode rows one evening and 1.92 the next morning,
``bench/spec_flow_cost.py``); and a CPU model with no table of its own borrows its family's. So the speculator
times every decode-phase forward of a lone request as the scheduler runs it (its sampling and verification
included): plain decode steps (1 row) and verifies (1 + drafts rows), the last ``WINDOW`` of each width, and fits
one factor ``s``: how much dearer than the table the extra rows measure, each width weighted by how often it ran.
The table in force prices ``w`` rows at ``1 + s * (C(w) - 1)``: the table's shape, the measured level. One factor
rather than a measured cost per width, because the policy only ever runs the widths it already thinks pay: a width
it stopped drafting would keep a stale figure, while the factor moves every width with the ones that run.

Medians, not means: a VM's step times have a long tail (a descheduled thread holds a step for a time slice). And
the table counts as ``PRIOR_SAMPLES`` verifies at factor 1, so a few minutes of a spell move the factor, a few steps
do not: served on the Zen 4 EPYC without that weight, the factor swung between 0.60 and 1.15 within ten seconds
(2-row verifies measured at 0.97-1.24 decode rows as the windows filled). Until both a baseline (``MIN_DECODE``
plain steps) and ``MIN_WIDTH`` verifies of some width exist, the table is the host's own.
``SGLANG_SPEC_COST_CALIBRATION=0`` keeps the host's table throughout (for experiments; ``bench/spec_replay.py``'s
deterministic replays price by the table too).
"""

from __future__ import annotations

import statistics
from collections import deque

from sglang.srt.speculative.draft_policy import CostTable, _interpolate
from sglang.utils.env import env_flag

CALIBRATION_ENV = "SGLANG_SPEC_COST_CALIBRATION"
WINDOW = 32  # timings kept per width: about a minute of one stream's verifies at that width, a few seconds of decode
DECODE_WINDOW = 64
MIN_DECODE = 16  # plain one-request steps before the baseline counts
MIN_WIDTH = 8  # verifies of a width before it counts in the fit
PRIOR_SAMPLES = 16  # the table's weight in the fit, in verifies at factor 1
REFRESH = 8  # observations between two fits
STEP = 0.05  # the factor moves in steps of this size (a table is priced afresh per distinct factor: few of them)
SCALE_MIN, SCALE_MAX = 0.25, 4.0  # beyond these a measurement is more likely wrong than the table


class VerifyCostMeter:
    """The verify costs a speculator prices drafts by: ``prior`` (the host's table, ``draft_policy.verify_costs``)
    with its extra rows scaled by the factor measured on this server. Owned by one ``Speculator``; fed by the
    scheduler after each decode-phase forward of one request (:meth:`observe`), read by the draft policy each step
    (:attr:`table`). Not thread-safe (the scheduler's thread only)."""

    def __init__(self, prior: tuple[tuple[int, float], ...], enabled: bool | None = None) -> None:
        self.prior = prior
        self.enabled = env_flag(CALIBRATION_ENV, True) if enabled is None else enabled
        self.table = CostTable.of(prior)  # in force
        self.scale = 1.0
        self.decode: deque[float] = deque(maxlen=DECODE_WINDOW)
        self.widths: dict[int, deque[float]] = {}
        self._since = 0
        self.observed = 0  # timings taken, all widths (the windows keep the latest)

    def observe(self, rows: int, seconds: float) -> None:
        """A decode-phase forward of one request took ``seconds`` (``rows``: 1 for a plain decode step, ``1 + drafts``
        for a verify). Refits every ``REFRESH`` observations."""
        if not self.enabled or rows < 1 or not seconds > 0.0:
            return
        (self.decode if rows == 1 else self.widths.setdefault(rows, deque(maxlen=WINDOW))).append(seconds)
        self.observed += 1
        self._since += 1
        if self._since >= REFRESH:
            self._since = 0
            self._fit()

    def measured(self) -> dict[int, float]:
        """Each width's median over the plain step's median, in decode rows (widths with ``MIN_WIDTH`` verifies; empty
        without a baseline)."""
        if len(self.decode) < MIN_DECODE:
            return {}
        base = statistics.median(self.decode)
        return {w: statistics.median(t) / base for w, t in sorted(self.widths.items()) if len(t) >= MIN_WIDTH}

    def _fit(self) -> None:
        num = den = 0.0
        count = 0
        for w, cost in self.measured().items():
            extra = _interpolate(self.prior, w) - 1.0
            if extra <= 0.0:  # a table whose rows cost nothing extra: no level to scale
                continue
            n = len(self.widths[w])
            num += n * (cost - 1.0)
            den += n * extra
            count += n
        if den <= 0.0:
            return
        prior = PRIOR_SAMPLES * den / count  # PRIOR_SAMPLES verifies of the measured widths' mix, at factor 1
        scale = min(SCALE_MAX, max(SCALE_MIN, round((num + prior) / (den + prior) / STEP) * STEP))
        if abs(scale - self.scale) >= STEP / 2:
            self.scale = scale
            self.table = CostTable.of(tuple((r, 1.0 + (c - 1.0) * scale) for r, c in self.prior))

    def describe(self) -> str:
        """The table in force against the prior, as the decode log reports it when the factor moves."""
        got = ", ".join(f"{w} rows {c:.2f}" for w, c in self.measured().items())
        return (f"verify rows priced at {self.scale:.2f}x the CPU model's table (measured over "
                f"{len(self.decode)} plain steps: {got or 'no verifies yet'}; {CALIBRATION_ENV}=0 keeps the table)")
