"""Sampling parameters and the batched sampler."""

from __future__ import annotations

import pytest
import torch

from sglang.srt.layers.sampler import RequestSampler, sample
from sglang.srt.sampling.sampling_params import SamplingParams, SamplingParamsError


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"temperature": -1}, "temperature must be >= 0"),
        ({"top_p": 0}, r"top_p must be in \(0, 1\]"),
        ({"top_k": 0}, "top_k must be -1"),
        ({"max_new_tokens": -3}, "max_new_tokens must be >= 0"),
        ({"min_p": 2}, r"min_p must be in \[0, 1\]"),
        ({"frequency_penalty": 5}, r"frequency_penalty must be in \[-2, 2\]"),
        ({"temperature": "hot"}, "'temperature' must be a number"),
        ({"seed": 1.5}, "seed must be an integer"),
        ({"stop": [""]}, "stop must be a non-empty string"),
        ({"tempreature": 1}, r"unknown sampling parameter\(s\) \['tempreature'\]"),
    ],
)
def test_invalid_parameters_name_the_parameter(params, message):
    with pytest.raises(SamplingParamsError, match=message):
        SamplingParams.from_dict(params)


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
    r = _s(temperature=0, repetition_penalty=10.0)
    r.prompt_tokens = {1}
    assert sample(LOGITS, [r])[0] == [2]


def test_logprobs_report_the_chosen_token_and_top_alternatives():
    ids, infos = sample(LOGITS, [_s(temperature=0, logprobs=True, top_logprobs_num=2)])
    lp, top = infos[0]
    assert lp == pytest.approx(float(torch.log_softmax(LOGITS[0], -1)[1]))
    assert [t for t, _ in top] == [1, 2]
