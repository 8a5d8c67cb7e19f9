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
