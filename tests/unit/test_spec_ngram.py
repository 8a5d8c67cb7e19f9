"""NGRAM speculative decoding's building blocks, without a model: the n-gram store, the acceptance
rules (greedy walk and target-only rejection sampling, checked against exact tiny distributions) and
the adaptive draft length."""

from __future__ import annotations

import math

import pytest
import torch

from sglang.srt.layers.sampler import RequestSampler, target_probs
from sglang.srt.sampling.sampling_params import SamplingParams
from sglang.srt.speculative.draft_policy import PROBE_EVERY, DraftState, MatchAcceptance, best_k, expected_tokens, fit_budget, probe_every
from sglang.srt.speculative.ngram_store import NgramStore
from sglang.srt.speculative.verify import accept_chain, verify

V = 6


def sampler(seed: int = 0, **params) -> RequestSampler:
    return RequestSampler(SamplingParams.from_dict({"max_new_tokens": 16, **params}, V), seed, 0)


# -- the store ---------------------------------------------------------------------------------------
def test_prompt_body_is_indexed_and_the_longest_suffix_wins():
    s = NgramStore(1, 4)
    # "7 8" occurs twice with different continuations; the 3-gram "1 7 8" picks the first one
    s.add("a", [1, 7, 8, 2, 3, 4, 5, 7, 8, 9, 9, 1, 7, 8])
    assert s.draft("a", 3) == [2, 3, 4]
    s.extend("a", [2, 3])
    assert s.draft("a", 2) == [4, 5]


def test_bfs_takes_the_latest_occurrence_prob_the_most_frequent_successor():
    seq = [5, 1, 5, 1, 5, 1, 5, 2, 5]
    bfs, prob = NgramStore(1, 1, match_type="BFS"), NgramStore(1, 1, match_type="PROB")
    bfs.add("r", seq)
    prob.add("r", seq)
    assert bfs.draft("r", 1) == [2]  # "5" was last followed by 2
    assert prob.draft("r", 1) == [1]  # "5" was followed by 1 three times, by 2 once


def test_drafts_come_from_other_requests_after_they_finish_and_depth_caps_them():
    s = NgramStore(1, 3, max_depth=2)
    s.add("old", [10, 11, 12, 13, 14, 15])
    s.finish("old")
    s.add("new", [3, 10, 11])
    assert s.draft("new", 5) == [12, 13]  # max_depth 2
    assert s.draft("missing", 3) == [] and s.draft("new", 0) == []
    s.add("none", [40, 41])
    assert s.draft("none", 3) == []  # no suffix seen before: nothing drafted


def test_capacity_evicts_the_least_recently_written_entries():
    s = NgramStore(1, 2, capacity=5)
    s.add("a", list(range(20)))
    assert len(s) == 5
    s.add("b", [1])
    assert s.draft("b", 2) == []  # "1" was evicted long ago
    s.add("c", [18])
    assert s.draft("c", 1) == [19]  # recent entries stay


def test_the_store_stays_within_its_memory_budget_at_the_default_capacity():
    """Upstream's default capacity (10M) counts C++ trie nodes; a Python entry costs ~ENTRY_BYTES, so the store also
    keeps under SGLANG_SPEC_NGRAM_MAX_MB: fed far past the budget, its traced memory stays near it."""
    import random
    import tracemalloc

    from sglang.srt.speculative.ngram_store import ENTRY_BYTES

    rng = random.Random(0)
    tracemalloc.start()
    try:
        s = NgramStore(max_mb=2)  # the default capacity and windows; a 2 MiB budget keeps the test fast
        assert s.capacity == 2 * 2**20 // ENTRY_BYTES
        for i in range(16):  # ~6 entries a token: 16k tokens write ~18x the budget's entries
            s.add(str(i), [rng.randrange(49152) for _ in range(1000)])
            s.finish(str(i))
        current = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert len(s) == s.capacity
    assert current < 1.6 * 2 * 2**20  # entries plus the token lists they still point at (about 1.5x at 2 MiB)
    s.add("tail", [1, 2, 3, 1, 2])
    assert s.draft("tail", 2) == [3, 1]  # recent entries still draft


def test_windows_are_validated():
    with pytest.raises(ValueError, match="match windows"):
        NgramStore(3, 2)


# -- greedy acceptance ---------------------------------------------------------------------------------
def rows_with_argmax(best: list[int]) -> torch.Tensor:
    rows = torch.zeros(len(best), V)
    for j, b in enumerate(best):
        rows[j, b] = 5.0
    return rows


def test_greedy_accepts_while_drafts_match_the_argmax_then_emits_the_targets_token():
    s = sampler(temperature=0)
    assert accept_chain(rows_with_argmax([1, 2, 3, 4]), [1, 2, 0], s)[0] == [1, 2, 3]  # third draft rejected: the row's argmax
    assert accept_chain(rows_with_argmax([1, 2, 3, 4]), [1, 2, 3], s)[0] == [1, 2, 3, 4]  # all accepted + the bonus
    assert accept_chain(rows_with_argmax([5, 2]), [1], s)[0] == [5]  # first rejected: what decoding would emit


def test_force_greedy_verify_walks_greedily_for_sampling_requests_under_ngram_only(monkeypatch):
    from sglang.srt.speculative.verify import FORCE_GREEDY_ENV, force_greedy

    rows = torch.tensor([[0.0, 1.0, 0.9, 0, 0, 0], [0, 0, 1.0, 0.9, 0, 0]])  # near ties: sampling would often differ
    for seed in range(20):
        assert accept_chain(rows, [1], sampler(seed, temperature=1.0), force_greedy=True)[0] == [1, 2]
    assert {tuple(accept_chain(rows, [1], sampler(seed, temperature=1.0))[0]) for seed in range(20)} != {(1, 2)}
    monkeypatch.setenv(FORCE_GREEDY_ENV, "1")
    assert force_greedy("NGRAM") and not force_greedy("STANDALONE")  # upstream's switch is NGRAM's
    monkeypatch.setenv(FORCE_GREEDY_ENV, "off")
    assert not force_greedy("NGRAM")


def test_verify_splits_rows_per_request_and_samples_undrafted_rows_plainly():
    a, b, c = sampler(temperature=0), sampler(temperature=0), sampler(temperature=0)
    logits = torch.cat([rows_with_argmax([2, 3, 1]), rows_with_argmax([4]), rows_with_argmax([0, 5])])
    toks, infos = verify(logits, [[2, 3], [], [1]], [a, b, c])
    assert toks == [[2, 3, 1], [4], [0]]
    assert infos == [[None] * 3, [None], [None]]


def test_logprobs_for_every_emitted_token_from_the_penalised_logits():
    s = sampler(temperature=0, logprobs=True, top_logprobs_num=2, logit_bias={"3": 10.0})
    rows = rows_with_argmax([1, 2, 0])
    toks, infos = accept_chain(rows, [1, 2], s)
    assert toks == [3]  # the bias makes 3 the argmax of every row: the first draft is rejected
    lp, top = infos[0]
    biased = rows[0].clone()
    biased[3] += 10.0
    assert lp == pytest.approx(float(torch.log_softmax(biased, -1)[3]))
    assert [t for t, _ in top] == [3, 1]


def test_penalties_see_the_drafts_before_each_row():
    # row 1 follows draft 2: with a frequency penalty, 2 loses there (and only there)
    s = sampler(temperature=0, frequency_penalty=2.0)
    rows = torch.zeros(3, V)
    rows[0, 2] = 1.0
    rows[1, 2], rows[1, 4] = 1.5, 1.0
    rows[2, 0] = 1.0
    toks, _ = accept_chain(rows, [2, 2], s)
    assert toks == [2, 4]  # without the draft's penalty, row 1 would accept the second 2


# -- rejection sampling: lossless at thresholds 1.0 -------------------------------------------------------
Q0 = torch.tensor([0.05, 0.4, 0.1, 0.25, 0.15, 0.05])
Q1 = torch.tensor([0.3, 0.1, 0.2, 0.1, 0.2, 0.1])


def _chi2(counts: list[int], probs: torch.Tensor) -> float:
    n = sum(counts)
    return sum((c - n * float(p)) ** 2 / (n * float(p)) for c, p in zip(counts, probs) if p > 0)


# chi-square 99.9% quantile with 5 degrees of freedom: a correct rule fails about once in 1000 seeds; the
# seeds are fixed, so the test is deterministic, and a wrong rule (exact-match acceptance, a residual that
# keeps the draft) lands far beyond it
CHI2_5DOF_999 = 20.52


@pytest.mark.parametrize("draft", [1, 3, 5])
def test_first_emitted_token_is_distributed_as_the_target(draft):
    rows = torch.log(torch.stack([Q0, Q1]))
    s = sampler(seed=draft, temperature=1.0)
    first = [0] * V
    n = 6000
    for _ in range(n):
        toks, _ = accept_chain(rows, [draft], s)
        first[toks[0]] += 1
    assert _chi2(first, Q0) < CHI2_5DOF_999, first
    # the draft is accepted exactly with its target probability
    assert abs(first[draft] / n - float(Q0[draft])) < 4 * math.sqrt(float(Q0[draft]) * (1 - float(Q0[draft])) / n)


def test_token_after_an_accepted_draft_is_distributed_as_its_row():
    rows = torch.log(torch.stack([Q0, Q1]))
    s = sampler(seed=7, temperature=1.0)
    second = [0] * V
    for _ in range(8000):
        toks, _ = accept_chain(rows, [1], s)
        if len(toks) == 2:
            second[toks[1]] += 1
    assert sum(second) > 2500  # accepted about 40% of the time
    assert _chi2(second, Q1) < CHI2_5DOF_999, second


def test_temperature_and_top_k_shape_the_target_the_walk_samples_from():
    logits = torch.log(Q0)
    s = sampler(seed=3, temperature=0.5, top_k=2)
    q = target_probs(logits, s.params)
    q = q / q.sum()
    assert int((q > 0).sum()) == 2
    first = [0] * V
    for _ in range(3000):
        first[accept_chain(torch.stack([logits, logits]), [4], s)[0][0]] += 1
    assert first[4] == 0 and first[0] == 0  # outside the top 2: never emitted, draft or not
    kept = [1, 3]
    assert _chi2([first[i] for i in kept], q[kept]) < 10.83  # 1 degree of freedom, 99.9%


def test_an_acceptance_threshold_below_one_accepts_more_than_the_target_probability():
    rows = torch.log(torch.stack([Q0, Q1]))
    lossless, lossy = sampler(seed=1, temperature=1.0), sampler(seed=1, temperature=1.0)
    n = 3000
    a = sum(accept_chain(rows, [3], lossless)[0][0] == 3 for _ in range(n))
    b = sum(accept_chain(rows, [3], lossy, thr_acc=0.5)[0][0] == 3 for _ in range(n))
    assert abs(a / n - 0.25) < 0.04 and abs(b / n - 0.5) < 0.04
    single = sampler(seed=1, temperature=1.0)
    assert all(accept_chain(rows, [1], single, thr_single=0.4)[0][:1] == [1] for _ in range(50))


# -- the draft length -----------------------------------------------------------------------------------
def test_expected_tokens_and_best_k():
    assert expected_tokens(0.5, 2) == pytest.approx(1.75)
    assert best_k(0.0, 8) == 0  # nothing is ever accepted: no drafts
    assert best_k(0.05, 8, row_cost=0.12, base_cost=1.0) == 0
    ks = [best_k(a / 10, 8, row_cost=0.12, base_cost=1.0) for a in range(10)]
    assert ks == sorted(ks) and ks[-1] >= 5  # higher acceptance, longer drafts
    assert best_k(0.9, 8, row_cost=0.0, base_cost=1.0) == 8
    # the verify step's own cost: a draft accepted 40% of the time pays for its row, not for the step too
    assert best_k(0.4, 8, row_cost=0.3, base_cost=1.0) == 1 and best_k(0.4, 8, row_cost=0.3, base_cost=1.16) == 0
    assert best_k(0.8, 8, row_cost=0.3, base_cost=1.16) >= 2


def test_best_k_is_the_first_draft_length_with_the_best_modelled_rate_on_every_table():
    """best_k runs once a request a step, so it sums E(k) as it goes and reads the table once; what it returns is
    still the definition's: the smallest k whose expected_tokens(a, k) / verify_cost(1 + k) beats MIN_GAIN and every
    shorter k by 0.01%."""
    from sglang.srt.speculative import draft_policy as dp

    def by_definition(a: float, k_max: int, family: str | None, row_cost: float | None = None) -> int:
        best, best_rate = 0, dp.MIN_GAIN
        for k in range(1, k_max + 1):
            cost = 1.0 + row_cost * k if row_cost is not None else dp.verify_cost(1 + k, family)
            rate = expected_tokens(a, k) / cost
            if rate > best_rate * 1.0001:
                best, best_rate = k, rate
        return best

    for family in [*dp.VERIFY_COSTS_BY_FAMILY, None]:
        for a in [i / 200 for i in range(201)]:
            for k_max in (0, 1, 3, 8, 15):
                assert best_k(a, k_max, family=family) == by_definition(a, k_max, family), (family, a, k_max)
    assert all(best_k(a / 50, 8, row_cost=0.3, base_cost=1.0) == by_definition(a / 50, 8, None, 0.3) for a in range(51))


def test_verify_costs_follow_the_cpu_kernel_family(monkeypatch):
    from sglang.srt.speculative import draft_policy as dp

    avx2, vnni = dp.verify_costs("avx2"), dp.verify_costs("avx512_vnni")
    assert avx2 != vnni and dp.verify_costs("no_such_family") == dp.VERIFY_COSTS_BY_FAMILY[dp.FALLBACK_FAMILY][0].rows
    for runs in dp.VERIFY_COSTS_BY_FAMILY.values():
        assert len({r.cpu for r in runs}) == len(runs)  # one table per CPU model
        for run in runs:  # rows ascending, costs rising: interpolation and the last slope stay meaningful
            table = run.rows
            assert [r for r, _ in table] == sorted({r for r, _ in table}) and [c for _, c in table] == sorted(c for _, c in table)
    c = dict(avx2)
    assert dp.verify_cost(7, "avx2") == pytest.approx((c[6] + c[8]) / 2)  # between 6 and 8 rows
    assert dp.verify_cost(20, "avx2") == pytest.approx(c[16] + (c[16] - c[12]) / 4 * 4)  # past the last width, its slope
    # avx2's second row costs 0.3 of a decode row: a draft accepted 30% of the time does not pay there, where VNNI's does
    assert dp.best_k(0.3, 8, family="avx2") == 0 and dp.best_k(0.3, 8, family="avx512_vnni") >= 1
    assert dp.best_k(0.6, 8, family="avx2") == dp.best_k(0.6, 8, family="avx512_vnni") == 2
    # this host's table is the family the CPU's flags and SGLANG_CPU_ISA pick (decided once, in isa.py)
    import sglang.host
    from sglang.srt.layers.cpu_kernels import isa

    vnni_cpu = isa.FAMILIES["avx512_vnni"].features | isa.FAMILIES["avx2"].features
    monkeypatch.setattr(sglang.host, "cpu_flags", lambda: frozenset(vnni_cpu))
    monkeypatch.delenv("SGLANG_CPU_ISA", raising=False)
    dp._host.cache_clear()
    try:
        assert dp.verify_costs() == vnni and dp.verify_cost(3) == dp.verify_cost(3, "avx512_vnni")
        monkeypatch.setenv("SGLANG_CPU_ISA", "avx2")  # forced down to avx2 on the same CPU
        dp._host.cache_clear()
        zen1 = "AMD EPYC (family 23 model 1)"  # a model with its own table, not the family's first
        monkeypatch.setattr(sglang.host, "cpu_model", lambda: zen1)
        dp._host.cache_clear()
        own = next(t.rows for t in dp.VERIFY_COSTS_BY_FAMILY["avx2"] if t.cpu == zen1)
        assert own != avx2 and dp.verify_costs() == own and dp.verify_costs(cpu=zen1) == own  # this CPU model's table
        assert dp.verify_costs(cpu="AMD EPYC (family 23 model 49)") == avx2  # another model of the host's family
    finally:
        dp._host.cache_clear()


def test_the_verify_costs_and_the_arithmetic_tables_name_the_same_cpu_models():
    # a typo in a model's name would silently price its rows by the family's first table; and a CPU neither table
    # knows takes one model's figures for both decisions
    import re

    from sglang.srt.layers.cpu_kernels.isa import MEASURED
    from sglang.srt.speculative import draft_policy as dp

    for family, runs in dp.VERIFY_COSTS_BY_FAMILY.items():
        assert all(re.fullmatch(r".+ \(family \d+ model \d+\)", r.cpu) for r in runs)
        assert {r.cpu for r in runs} <= {m.cpu for m in MEASURED[family]}, family
        assert runs[0].cpu == MEASURED[family][0].cpu, family


def test_a_cpu_model_prices_verify_rows_by_its_own_table(monkeypatch):
    # two CPUs of one family and one model name whose kernels run at different speeds (a Zen 1 and a Zen 2 EPYC)
    from sglang.srt.speculative import draft_policy as dp

    slow = dp.VerifyCosts("AMD EPYC (family 23 model 1)", ((1, 1.1), (2, 1.6), (4, 2.8), (8, 5.2)))
    fast = dp.VerifyCosts("AMD EPYC (family 23 model 49)", ((1, 1.0), (2, 1.2), (4, 1.6), (8, 2.4)))
    monkeypatch.setitem(dp.VERIFY_COSTS_BY_FAMILY, "avx2", (fast, slow))
    assert dp.verify_costs("avx2", slow.cpu) == slow.rows and dp.verify_costs("avx2", fast.cpu) == fast.rows
    assert dp.verify_costs("avx2", "Intel Core (family 6 model 60)") == fast.rows  # unmeasured: the family's first
    assert dp.verify_costs("avx2") == fast.rows
    # at 60% acceptance the cheap rows earn two drafts, the dear ones none
    assert dp.best_k(0.6, 8, family="avx2", cpu=fast.cpu) >= 2 and dp.best_k(0.6, 8, family="avx2", cpu=slow.cpu) == 0
    monkeypatch.setattr(dp, "_host", lambda: ("avx2", slow.cpu))  # this host is the slow model
    assert dp.verify_costs() == slow.rows and dp.best_k(0.6, 8) == 0


def price_verify_rows_as(monkeypatch: pytest.MonkeyPatch, family: str, cpu_marker: str) -> None:
    """Price verify rows by one measured CPU's table (the one of ``family`` whose CPU model contains ``cpu_marker``)
    instead of this host's: which draft lengths pay is each CPU's own call (the Zen 1 EPYC's dearer rows turn down
    acceptances the Zen 4 one drafts at), and these tests assert the policy's logic, whatever CPU runs them."""
    from sglang.srt.speculative import draft_policy as dp

    cpu = next(t.cpu for t in dp.VERIFY_COSTS_BY_FAMILY[family] if cpu_marker in t.cpu)
    monkeypatch.setattr(dp, "_host", lambda: (family, cpu))


def test_draft_state_backs_off_then_probes(monkeypatch):
    price_verify_rows_as(monkeypatch, "avx512_vnni", "family 25 model 17)")  # where the prior 0.6 drafts a first match
    st = DraftState()
    assert st.want(8) > 0
    for _ in range(20):
        st.update(4, 0)
    every = probe_every()
    assert every >= PROBE_EVERY
    wants = [st.want(8) for _ in range(3 * every)]
    assert wants.count(1) == 3 and set(wants) == {0, 1}  # one probe every probe_every() steps
    for _ in range(20):
        st.update(6, 6)
    assert st.want(8) >= 4


def test_probes_are_further_apart_where_a_two_row_verify_is_dear(monkeypatch):
    from sglang.srt.speculative import draft_policy as dp

    fast = dp.VerifyCosts("fast CPU", ((1, 1.0), (2, 1.1), (4, 1.3)))  # a probe's extra row: 0.1 of a decode row
    dear = dp.VerifyCosts("dear CPU", ((1, 1.0), (2, 1.7), (4, 3.0)))  # 0.7: every 8 steps would spend 9% of them
    monkeypatch.setitem(dp.VERIFY_COSTS_BY_FAMILY, "avx2", (fast, dear))
    assert probe_every("avx2", "fast CPU") == PROBE_EVERY  # never closer than PROBE_EVERY
    assert probe_every("avx2", "dear CPU") == math.ceil(0.7 / dp.PROBE_BUDGET) == 35
    monkeypatch.setattr(dp, "_host", lambda: ("avx2", "dear CPU"))
    st = DraftState()
    for _ in range(20):
        st.update(4, 0)
    wants = [st.want(8) for _ in range(70)]
    assert wants.count(1) == 2 and wants.index(1) == 34  # the 35th step at k = 0 probes, then the 70th


def test_match_length_is_the_longest_window_that_occurred_before():
    s = NgramStore(1, 4)
    s.add("a", [1, 2, 3, 9, 2, 3])
    assert s.match("a")[0] == 2  # "2 3" occurred before (followed by 9); "9 2 3" did not
    s.extend("a", [9])
    assert s.match("a")[0] == 3  # "2 3 9" occurred before (followed by 2); "9 2 3 9" did not
    assert s.match("b")[0] == 0
    s.add("c", [7, 8])
    assert s.match("c")[0] == 0  # nothing ending "7 8" occurred before


SOURCE = [10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20]  # a passage in the prompt; the answer copies it with an edit


@pytest.mark.parametrize("answer, drafted", [
    ([10, 11, 12, 13, 99, 14], [15, 16, 17]),  # 99 inserted before 14: the copy goes on after 14
    ([10, 11, 12, 13, 99, 15], [16, 17, 18]),  # 99 in place of 14
    ([10, 11, 12, 13, 15, 16], [17, 18, 19]),  # 14 dropped
])
def test_an_edited_copy_drafts_the_source_again_after_the_edit(answer, drafted):
    s = NgramStore(1, 4)
    s.add("r", [1, 2, *SOURCE, 3, *answer])
    assert s.match("r")[0] == 4  # the four tokens before the edit, not the 1-2 token windows ending in it
    assert s.draft("r", 3) == drafted


def test_the_resync_needs_a_long_window_and_an_alignment():
    s = NgramStore(1, 4)
    s.add("r", [1, 2, *SOURCE, 3, 10, 11, 12, 13, 98, 99])  # two new tokens after "10 11 12 13": no edit of one token
    assert s.draft("r", 3) == [] and s.match("r")[0] == 0
    s.add("q", [1, 2, *SOURCE, 3, 12, 13, 99, 14])  # "12 13" is two tokens: too short to trust (RESYNC_BELOW 3)
    assert s.draft("q", 2) == [15, 16]  # the exact "14" window still drafts, as without the resync
    assert s.match("q")[0] == 1
    p = NgramStore(1, 4, match_type="PROB")
    p.add("r", [1, 2, *SOURCE, 3, 10, 11, 12, 13, 99, 14])
    assert p.match("r")[0] == 1  # PROB chains successors of the longest window: no resync


def test_an_unbroken_copy_keeps_its_longest_match():
    s = NgramStore(1, 4)
    s.add("r", [1, 2, *SOURCE, 3, 10, 11, 12, 13, 14])
    assert s.match("r")[0] == 4 and s.draft("r", 3) == [15, 16, 17]


def test_match_acceptance_learns_per_match_length_and_short_matches_draft_less():
    m = MatchAcceptance()
    assert m.rate(1) < m.rate(2) < m.rate(9)  # the measured priors
    assert MatchAcceptance.bucket(0) == MatchAcceptance.bucket(1) and MatchAcceptance.bucket(12) == MatchAcceptance.bucket(100)
    st = DraftState()
    assert st.want(5, m.rate(1)) < st.want(5, m.rate(12))  # the same request drafts longer after a longer match
    for _ in range(30):
        m.update(12, 5, 0)  # long matches that never hold (a request that rewrites, not copies)
        m.update(1, 1, 1)
    assert m.rate(12) < 0.1 and m.rate(1) > 0.9 and m.rate(3) == MatchAcceptance().rate(3)  # other buckets untouched
    assert st.want(5, m.rate(12)) == 0 and st.want(5, m.rate(1)) > 0
    m.update(12, 0, 0)  # no drafts: nothing learned
    assert m.rate(12) < 0.1


def test_a_match_bucket_decides_ngram_drafts_whatever_the_request_missed_before(monkeypatch):
    # priced by the Zen 4 EPYC's table, where the buckets' priors were measured (whether a prior pays is the host's
    # table's call: below, the Zen 1 EPYC's dearer rows turn the same 1-token match down)
    price_verify_rows_as(monkeypatch, "avx512_vnni", "family 25 model 17)")
    m, st = MatchAcceptance(), DraftState()
    for _ in range(20):
        st.update(4, 0)  # this request's drafts all failed (short matches of a paraphrase)
    assert st.want(5) == 0  # alone, its estimate would stop drafting (a draft model's drafts)
    assert st.want(5, m.rate(12)) == best_k(m.rate(12), 5) > 0  # a long match still drafts, as its bucket earns
    assert st.want(5, m.rate(1, ambiguous=True)) == 0  # a common word's latest successor
    assert st.want(5, m.rate(1)) > 0  # a 1-token match followed by one token so far (a rare word of the prompt)
    price_verify_rows_as(monkeypatch, "avx2", "family 23 model 1)")  # a 2-row verify at 1.6 decode rows: 1.45 tokens lose
    assert st.want(5, m.rate(1)) == 0 and st.want(5, m.rate(12)) > 0


def test_a_match_is_ambiguous_once_its_window_was_followed_by_two_different_tokens():
    s = NgramStore(1, 4)
    s.add("a", [5, 1, 2, 6, 7, 8, 3, 5])
    assert s.match("a") == (1, False)  # "5" was followed by 1 only
    s.extend("a", [4, 9, 5])
    assert s.match("a") == (1, True)  # "5" then 1, then 4: its draft is a guess
    assert s.draft("a", 2) == [4, 9]  # still the latest successor (BFS)
    s.add("b", [1, 2, 6, 0, 6, 7])
    assert s.match("b") == (2, False) and s.match("nobody") == (0, False)
    p = NgramStore(1, 4, match_type="PROB")
    p.add("a", [5, 1, 5, 4, 5])
    assert p.match("a") == (1, True)


def test_ambiguous_matches_are_their_own_buckets():
    m = MatchAcceptance()
    assert m.rate(1, ambiguous=True) < m.rate(1) and m.rate(2, ambiguous=True) < m.rate(2)
    assert MatchAcceptance.bucket(1, True) != MatchAcceptance.bucket(1) and MatchAcceptance.bucket(12, True) != MatchAcceptance.bucket(12)
    for _ in range(30):
        m.update(1, 3, 0, ambiguous=True)
    assert m.rate(1, ambiguous=True) < 0.05 and m.rate(1) == MatchAcceptance().rate(1)


def test_a_repeating_span_drafts_through_the_present():
    s = NgramStore(1, 8)
    s.add("r", [9, 8, 1, 2, 3, 1, 2, 3, 1, 2])  # a period of 3: "1 2"'s latest occurrence ends 3 tokens back
    assert s.draft("r", 7) == [3, 1, 2, 3, 1, 2, 3]  # not [3, 1, 2], the 3 tokens before the present
    assert s.draft("r", 2) == [3, 1]
    s.add("q", [7, 7])
    assert s.draft("q", 4) == [7, 7, 7, 7]
    s.add("x", [4, 5, 6, 4, 5])  # a span that began in the prompt: its copy reaches the present and goes on
    assert s.draft("x", 5) == [6, 4, 5, 6, 4]


def test_fit_budget_cuts_the_longest_first_and_stops_at_the_knee():
    assert fit_budget([4, 1, 3], batch=3, knee=8) == [2, 1, 2]
    assert fit_budget([4, 4], batch=8, knee=8) == [0, 0]
    assert fit_budget([0, 2], batch=2, knee=8) == [0, 2]
