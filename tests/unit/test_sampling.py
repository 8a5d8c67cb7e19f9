"""Sampling parameters and the batched sampler."""

from __future__ import annotations

import pytest
import torch

from sglang.srt.layers.sampler import RequestSampler, sample
from sglang.srt.sampling.sampling_params import SamplingParams, SamplingParamsError


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"temperature": -1}, r"temperature must be in \[0, 1e\+06\], got -1"),
        ({"top_p": 0}, r"top_p must be in \[1e-06, 1\]"),
        ({"top_k": -2}, r"top_k must be in \[-1, "),
        ({"max_new_tokens": -3}, r"max_new_tokens must be in \[0, "),
        ({"min_p": 2}, r"min_p must be in \[0, 1\]"),
        ({"frequency_penalty": 5}, r"frequency_penalty must be in \[-2, 2\]"),
        ({"temperature": "hot"}, "'temperature' must be a number"),
        ({"temperature": float("nan")}, "'temperature' must be finite"),
        ({"repetition_penalty": 1e-300}, r"repetition_penalty must be in \[0.01, 2\]"),
        ({"seed": 1.5}, "'seed' must be an integer"),
        ({"seed": 2**64}, r"seed must be in \[-2\*\*63, 2\*\*63-1\]"),
        ({"ignore_eos": 1}, "'ignore_eos' must be true or false"),
        ({"skip_special_tokens": "junk"}, "'skip_special_tokens' must be true or false"),
        ({"stop": [""]}, "stop must be a string or a list of at most 32 strings"),
        ({"stop": ["x"] * 33}, "stop must be a string or a list of at most 32 strings"),
        ({"stop_token_ids": [-5]}, r"stop_token_ids holds -5: token ids must be integers in \[0, 100\)"),
        ({"stop_token_ids": [100]}, r"token ids must be integers in \[0, 100\)"),
        ({"logit_bias": {"100": 1.0}}, r"logit_bias holds 100"),
        ({"logit_bias": {"5": 101}}, r"logit_bias\['5'\] must be a number in \[-100, 100\]"),
        ({"tempreature": 1}, r"unsupported sampling parameter\(s\) \['tempreature'\]"),
        ([1, 2], "sampling_params must be an object"),
    ],
)
def test_invalid_parameters_name_the_parameter(params, message):
    with pytest.raises(SamplingParamsError, match=message):
        SamplingParams.from_dict(params, vocab_size=100)


def test_a_near_zero_temperature_is_greedy_and_top_k_zero_is_off():
    p = SamplingParams.from_dict({"temperature": 1e-300, "top_k": 0})
    assert p.greedy and p.temperature == 0.0
    assert SamplingParams.from_dict({"top_k": 0}).top_k == -1
    # what made the scheduler die before: 1e-300 sampled through softmax gave NaN probabilities
    assert sample(LOGITS, [RequestSampler(p, 0, 0)])[0] == [1]


def test_extreme_but_legal_values_sample_finite_tokens():
    for kw in ({"temperature": 1e-6}, {"temperature": 1e6}, {"repetition_penalty": 0.01}, {"seed": -(2**63)}, {"seed": 2**63 - 1},
               {"logit_bias": {"3": 100, "1": -100}}):
        s = _s(**kw)
        s.prompt_tokens = {1, 2}
        tok = sample(LOGITS, [s])[0][0]
        assert 0 <= tok < LOGITS.shape[1]


def test_logit_bias_moves_the_choice():
    assert sample(LOGITS, [_s(temperature=0, logit_bias={"4": 10.0})])[0] == [4]
    assert sample(LOGITS, [_s(temperature=0, logit_bias={1: -100})])[0] == [2]


def test_non_finite_probabilities_fail_with_a_sampling_error():
    from sglang.srt.layers.sampler import SamplingError

    bad = torch.tensor([[0.0, float("nan"), 1.0, 1.0, 1.0]])
    with pytest.raises(SamplingError, match="row 0 are not finite"):
        sample(bad, [_s(temperature=1.0)])


def test_single_stop_string_becomes_a_list():
    assert SamplingParams.from_dict({"stop": "\n"}).stop == ["\n"]


def _s(**kw):
    return RequestSampler(SamplingParams.from_dict(kw), 0, 0)


LOGITS = torch.tensor([[0.0, 3.0, 2.9, 1.0, -1.0]])


def test_greedy_and_top_k_one_pick_the_argmax():
    assert sample(LOGITS, [_s(temperature=0)])[0] == [1]
    assert sample(LOGITS, [_s(temperature=1.0, top_k=1)])[0] == [1]


def test_seeded_sampling_is_reproducible():
    a = [sample(LOGITS, [s])[0][0] for s in [_s(temperature=1.0, seed=7)] for _ in range(20)]
    b = [sample(LOGITS, [s])[0][0] for s in [_s(temperature=1.0, seed=7)] for _ in range(20)]
    assert a == b and len(set(a)) > 1


def test_top_p_and_min_p_restrict_the_support():
    s = _s(temperature=1.0, top_p=0.5, seed=1)
    assert {sample(LOGITS, [s])[0][0] for _ in range(50)} <= {1, 2}
    s = _s(temperature=1.0, min_p=0.5, seed=1)
    assert {sample(LOGITS, [s])[0][0] for _ in range(50)} <= {1, 2}


def test_repetition_and_presence_penalties_move_away_from_seen_tokens():
    s = _s(temperature=0, presence_penalty=2.0)
    s.observe(1)
    assert sample(LOGITS, [s])[0] == [2]
    r = _s(temperature=0, repetition_penalty=2.0)
    r.prompt_tokens = {1}
    assert sample(LOGITS, [r])[0] == [2]


def test_logprobs_report_the_chosen_token_and_top_alternatives():
    ids, infos = sample(LOGITS, [_s(temperature=0, logprobs=True, top_logprobs_num=2)])
    lp, top = infos[0]
    assert lp == pytest.approx(float(torch.log_softmax(LOGITS[0], -1)[1]))
    assert [t for t, _ in top] == [1, 2]


def _sort_rule(probs: torch.Tensor, top_p: float) -> set[int]:
    """Top-p as upstream writes it: sort, keep a token while the mass before it is at most top_p."""
    sp, si = probs.sort(descending=True)
    return set(si[~(sp.cumsum(-1) - sp > top_p) & (sp > 0)].tolist())  # tokens of probability 0 never count


@pytest.mark.parametrize("sharpness", [0.3, 1.0, 3.0, 10.0, 40.0])
@pytest.mark.parametrize("top_p", [1e-6, 0.3, 0.9, 0.95, 0.9999])
def test_the_nucleus_found_among_the_largest_is_the_sort_rules(sharpness, top_p):
    """From a point mass to a nearly flat 5,000-token distribution (a nucleus of 1 token to ~4,000: every try of
    NUCLEUS_TRIES, and the full sort), the kept set is the one a full sort keeps, most probable first."""
    from sglang.srt.layers.sampler import nucleus

    g = torch.Generator().manual_seed(int(sharpness * 100) + int(top_p * 1e4))
    for _ in range(4):
        probs = torch.softmax(torch.randn(5000, generator=g) * sharpness, -1)
        ids, kept = nucleus(probs, top_p)
        assert set(ids.tolist()) == _sort_rule(probs, top_p)
        assert torch.equal(kept, probs[ids]) and bool((kept[:-1] >= kept[1:]).all())


def test_draw_follows_the_weights_and_never_picks_a_zero():
    """A chi-square test over 20,000 draws (5 degrees of freedom: fails by chance once in 10^4 runs at this bound)
    on unnormalized weights with zeros among them, the last index included."""
    from sglang.srt.layers.sampler import draw

    w = torch.tensor([0.0, 3.0, 0.0, 1.0, 0.5, 2.0, 0.0, 0.25, 1.25, 0.0])
    g = torch.Generator().manual_seed(11)
    n = 20_000
    counts = torch.bincount(torch.tensor([draw(w, g) for _ in range(n)]), minlength=w.numel()).double()
    assert counts[w == 0].sum() == 0
    expected = w.double() / w.sum() * n
    nz = w > 0
    chi2 = float(((counts[nz] - expected[nz]) ** 2 / expected[nz]).sum())
    assert chi2 < 25.7, (counts.tolist(), expected.tolist())  # chi-square(5) at p = 1e-4
    assert draw(torch.tensor([0.0, 0.0, 2.0]), g) == 2


def test_sampled_rows_follow_the_requests_distribution():
    """sample() at temperature 0.8, top-p 0.9 and top-k 5 draws tokens as target_probs gives them (chi-square)."""
    from sglang.srt.layers.sampler import target_probs

    logits = torch.tensor([[2.0, 1.5, 1.0, 0.5, 0.0, -0.5, -1.0, -3.0]])
    for kw in ({"temperature": 0.8, "top_p": 0.9}, {"temperature": 0.8, "top_k": 5}, {"temperature": 1.3}):
        s = _s(seed=3, **kw)
        q = target_probs(logits[0], s.params)
        q = q.double() / q.sum()
        n = 6_000
        counts = torch.bincount(torch.tensor([sample(logits, [s])[0][0] for _ in range(n)]), minlength=8).double()
        nz = q > 0
        assert counts[~nz].sum() == 0
        chi2 = float(((counts[nz] - q[nz] * n) ** 2 / (q[nz] * n)).sum())
        assert chi2 < 30.0, (kw, counts.tolist(), (q * n).tolist())  # at most 7 degrees of freedom, p < 1e-4


def test_a_batch_samples_each_row_as_that_row_alone():
    """sample_rows (the batch's tensor work done once) draws, row by row, the token sample_row draws for that row with
    the same generator state: mixed temperatures, top-k, top-p (nuclei inside and past the first try), min-p and
    greedy-free rows of a 49,152-token vocabulary."""
    from sglang.srt.layers.sampler import NUCLEUS_TRIES, nucleus, sample_row, sample_rows

    g = torch.Generator().manual_seed(5)
    logits = torch.randn(7, 49152, generator=g) * torch.tensor([[8.0], [3.0], [1.0], [0.2], [5.0], [2.0], [4.0]])
    kws = [{"temperature": 0.2, "top_p": 0.9}, {"temperature": 0.7}, {"temperature": 1.0, "top_p": 0.95},
           {"temperature": 1.0, "top_p": 0.5, "top_k": 40}, {"temperature": 0.5, "min_p": 0.1}, {"temperature": 1.3, "top_k": 3},
           {"temperature": 0.9, "top_p": 0.999, "min_p": 0.001}]
    # a row whose draw sits on a rounding boundary: 1 / temperature multiplied in, rather than divided, moved it
    edge = torch.tensor([[1.686759114265442, 0.0]])
    assert sample_rows(edge.repeat(2, 1), [_s(seed=2, temperature=0.7), _s(seed=2, temperature=0.7)], [0, 1]) == \
        [sample_row(edge[0], _s(temperature=0.7).params, _s(seed=2, temperature=0.7).generator)] * 2
    for seed in range(3):
        batch = [_s(seed=seed * 10 + i, **kw) for i, kw in enumerate(kws)]
        alone = [_s(seed=seed * 10 + i, **kw) for i, kw in enumerate(kws)]
        got = sample_rows(logits, batch, list(range(len(kws))))
        want = [sample_row(logits[i], s.params, s.generator, i) for i, s in enumerate(alone)]
        assert got == want
        # the generators moved alike: the next draws agree too
        assert [float(torch.rand((), generator=s.generator)) for s in batch] == [float(torch.rand((), generator=s.generator)) for s in alone]
    assert len(nucleus(torch.softmax(logits[2], -1), 0.95)[0]) > NUCLEUS_TRIES[0]  # row 2's nucleus is past the first try


@pytest.mark.parametrize("kw", [{"repetition_penalty": 1.3}, {"repetition_penalty": 0.7}, {"frequency_penalty": 0.6, "presence_penalty": -0.4},
                                {"repetition_penalty": 1.1, "frequency_penalty": -0.3, "presence_penalty": 0.5, "logit_bias": {"7": 3.5}}])
def test_the_penalty_vectors_kept_by_observe_give_the_dict_paths_logits(kw, monkeypatch):
    """Past DENSE_PENALTY_MIN a request's sampler keeps its seen tokens and counts as vectors (built at that step, then
    updated token by token); before and after, the logits are the dict path's (penalize_with's views), bit for bit."""
    import sglang.srt.layers.sampler as sampler
    from sglang.srt.layers.sampler import _penalize, penalize_with

    monkeypatch.setattr(sampler, "DENSE_PENALTY_MIN", (200, 40))  # the switch inside a short run over a 500-token vocabulary
    g = torch.Generator().manual_seed(3)
    s = _s(**kw)
    s.prompt_tokens = set(torch.randint(0, 500, (150,), generator=g).tolist())
    for t in torch.randint(0, 500, (30,), generator=g).tolist():
        s.observe(t)
    for step in range(8):
        logits = torch.randn(500, generator=g) * 4
        dense, view = logits.clone(), logits.clone()
        _penalize(dense, s)
        penalize_with(view, s, [])  # no extra tokens: _penalize on s itself, the dense path too
        ref = logits.clone()
        v = RequestSampler.__new__(RequestSampler)
        v.params, v.prompt_tokens, v.counts, v.bias, v.dense = s.params, s.prompt_tokens, dict(s.counts), None, False
        _penalize(ref, v)
        assert torch.equal(dense, ref) and torch.equal(view, ref) and not torch.equal(ref, logits)
        for t in torch.randint(0, 500, (5 + 2 * step,), generator=g).tolist():  # tokens new and repeated
            s.observe(t)
    assert (s.seen_mask is not None) == (kw.get("repetition_penalty", 1.0) != 1.0)  # built once past the bound, and kept
    assert (s.count_vec is not None) == ("frequency_penalty" in kw)


def test_min_p_with_top_p_stops_at_the_first_try_and_keeps_no_zero():
    """min-p zeroes the tail: once the candidates reach a zero every later token is zero too, so the first try decides
    (no sort of the vocabulary), and no token of probability 0 is kept."""
    from sglang.srt.layers.sampler import nucleus

    probs = torch.zeros(49152)
    probs[torch.arange(11) * 7] = torch.softmax(torch.arange(11.0), -1) * 0.5  # min-p left 11 tokens, mass 0.5
    ids, kept = nucleus(probs, 0.9)
    assert sorted(ids.tolist()) == [7 * i for i in range(11)] and bool((kept > 0).all())
