"""The live calibration of the draft policy's verify costs (``speculative/cost_meter.py``): the factor it fits from
timings, what it leaves alone, and how the policy reads the table it puts in force."""

from __future__ import annotations

import pytest

from sglang.srt.speculative import cost_meter as cm
from sglang.srt.speculative.draft_policy import CostTable, DraftState, _interpolate, best_k, probe_every
from sglang.utils.env import EnvValueError

PRIOR = ((1, 1.1), (2, 1.2), (3, 1.4), (4, 1.6), (6, 2.2), (8, 2.9))
DECODE = 0.003  # seconds: a plain step


def fed(meter: cm.VerifyCostMeter, widths: dict[int, float], n_decode: int = cm.MIN_DECODE, n_each: int = cm.MIN_WIDTH) -> cm.VerifyCostMeter:
    """``meter`` after ``n_decode`` plain steps and ``n_each`` verifies of each width at ``widths[w]`` decode rows,
    interleaved as a server runs them, then refitted (enough observations to pass ``REFRESH``)."""
    for i in range(max(n_decode, n_each * len(widths))):
        if i < n_decode:
            meter.observe(1, DECODE)
        if i < n_each:
            for w, c in widths.items():
                meter.observe(w, DECODE * c)
    meter._fit()
    return meter


def test_the_prior_rules_until_a_baseline_and_verifies_exist():
    m = cm.VerifyCostMeter(PRIOR, enabled=True)
    assert m.table == CostTable.of(PRIOR) and m.scale == 1.0
    fed(m, {4: 2.5}, n_decode=cm.MIN_DECODE - 1)  # one plain step short of a baseline
    assert m.table.rows == PRIOR and m.measured() == {}
    m = fed(cm.VerifyCostMeter(PRIOR, enabled=True), {4: 2.5}, n_each=cm.MIN_WIDTH - 1)  # too few verifies of the width
    assert m.table.rows == PRIOR and 4 not in m.measured()


def test_the_fitted_factor_scales_every_width_extra_row_cost():
    # 4 rows measured at 1.9 decode rows against the table's 1.6: the extra rows cost 1.5x; 6 rows agree (2.8 vs 2.2).
    # Full windows (64 verifies) against the table's 16 at factor 1: 1.4
    m = fed(cm.VerifyCostMeter(PRIOR, enabled=True), {4: 1.9, 6: 2.8}, n_each=cm.WINDOW)
    assert m.measured() == pytest.approx({4: 1.9, 6: 2.8})
    assert m.scale == pytest.approx((64 * 1.5 + cm.PRIOR_SAMPLES) / (64 + cm.PRIOR_SAMPLES)) == pytest.approx(1.4)
    assert [r for r, _ in m.table.rows] == [r for r, _ in PRIOR]
    assert [c for _, c in m.table.rows] == pytest.approx([1 + m.scale * (c - 1) for _, c in PRIOR])
    # a width never drafted moves with the rest (the factor, not a per-width figure)
    assert _interpolate(m.table.rows, 8) == pytest.approx(1 + 1.4 * 1.9)
    # cheaper than the table (a model that streams more bytes a row): below 1
    m = fed(cm.VerifyCostMeter(PRIOR, enabled=True), {2: 1.1, 4: 1.3}, n_each=cm.WINDOW)
    assert m.scale == pytest.approx(0.6)


def test_a_few_verifies_move_the_factor_less_than_many():
    few = fed(cm.VerifyCostMeter(PRIOR, enabled=True), {4: 1.9}).scale  # MIN_WIDTH verifies against the table's 16
    many = fed(cm.VerifyCostMeter(PRIOR, enabled=True), {4: 1.9}, n_each=cm.WINDOW).scale
    assert 1.0 < few < many < 1.5


def test_medians_ignore_a_descheduled_step_and_the_factor_is_bounded():
    m = cm.VerifyCostMeter(PRIOR, enabled=True)
    for _ in range(3):  # a few steps held for a time slice each
        m.observe(1, DECODE * 40)
        m.observe(4, DECODE * 60)
    fed(m, {4: 1.9}, n_decode=20, n_each=cm.WINDOW - 3)
    assert m.measured() == pytest.approx({4: 1.9})
    assert fed(cm.VerifyCostMeter(PRIOR, enabled=True), {4: 300.0}, n_each=cm.WINDOW).scale == cm.SCALE_MAX
    cheap = {w: 1.0 for w in (2, 3, 4, 6, 8)}  # extra rows measured free: the prior's weight and the floor hold it up
    assert fed(cm.VerifyCostMeter(PRIOR, enabled=True), cheap, n_each=cm.WINDOW).scale == cm.SCALE_MIN


def test_the_factor_tracks_the_recent_window():
    m = fed(cm.VerifyCostMeter(PRIOR, enabled=True), {4: 1.9}, n_each=cm.WINDOW)
    high = m.scale
    fed(m, {4: 1.3}, n_decode=cm.DECODE_WINDOW, n_each=cm.WINDOW)  # a faster spell replaces every kept timing
    assert high > 1.3 and m.scale < 0.7


def test_the_switch_keeps_the_table_and_a_typo_names_the_variable(monkeypatch):
    monkeypatch.setenv(cm.CALIBRATION_ENV, "0")
    m = fed(cm.VerifyCostMeter(PRIOR), {4: 1.9})
    assert not m.enabled and m.table.rows == PRIOR and m.measured() == {}
    monkeypatch.setenv(cm.CALIBRATION_ENV, "of")
    with pytest.raises(EnvValueError, match=cm.CALIBRATION_ENV):
        cm.VerifyCostMeter(PRIOR)
    monkeypatch.delenv(cm.CALIBRATION_ENV)
    assert cm.VerifyCostMeter(PRIOR).enabled


def test_the_policy_drafts_by_the_table_in_force():
    dear = fed(cm.VerifyCostMeter(PRIOR, enabled=True), {2: 1.6, 4: 2.8}, n_each=cm.WINDOW).table  # rows at 3x the table's
    assert dear.rows != PRIOR
    # an acceptance the prior drafts at is turned down once rows measure dearer, and the probes space out
    assert best_k(0.5, 7, table=PRIOR) >= 1 and best_k(0.5, 7, table=dear.rows) == 0
    assert dear.every == probe_every(table=dear.rows) > CostTable.of(PRIOR).every
    st = DraftState()
    for _ in range(20):
        st.update(4, 0)  # nothing accepted lately: the request sits at k = 0 and probes
    wants = [st.want(7, 0.05, dear) for _ in range(2 * dear.every)]
    assert wants.count(1) == 2 and wants.index(1) == dear.every - 1


def test_describe_names_the_factor_and_the_switch():
    m = fed(cm.VerifyCostMeter(PRIOR, enabled=True), {4: 1.9}, n_each=cm.WINDOW)
    text = m.describe()
    assert f"{m.scale:.2f}x" in text and m.scale > 1 and "4 rows 1.90" in text and cm.CALIBRATION_ENV in text


def test_the_decode_log_rate_survives_a_flush_and_the_calibration_line_is_rate_limited(caplog):
    import logging
    import re

    from sglang.srt.speculative import spec_worker as sw

    spec = sw.Speculator(None, lambda *a: None, lambda reqs: None)  # no scheduler: _log reads the counters only
    spec.housekeep = lambda: None
    spec.emitted, spec.tokens, spec.steps = 500, 500, 200
    spec.last_log = (spec.last_log[0] - 1.0, 500)  # the last line was 1 s ago, after 500 tokens
    spec.flush()  # /flush_cache: avg_spec_accept_length starts over, the log's rate must not (it went negative once)
    spec.emitted += 40
    spec.tokens += 40
    spec.meter.scale = 1.5  # the factor moved past the line's threshold
    with caplog.at_level(logging.INFO, logger=sw.logger.name):
        spec._log(1)
        spec.meter.scale = 2.0  # moved again right away: no second line within CALIBRATION_LOG_EVERY
        spec._log(1)
    rates = [float(m) for m in re.findall(r"gen throughput \(token/s\): (-?[\d.]+)", caplog.text)]
    assert len(rates) == 2 and all(r >= 0 for r in rates) and rates[0] > 0
    assert caplog.text.count("verify rows priced at") == 1 and "1.50x" in caplog.text
