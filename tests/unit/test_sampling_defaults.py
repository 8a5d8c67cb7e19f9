"""--sampling-defaults / --preferred-sampling-params: the layers a request's missing sampling fields take."""

from __future__ import annotations

import pytest

from sglang.srt.configs.generation_config import ModelGeneration, request_defaults, with_defaults
from sglang.srt.sampling.sampling_params import SamplingParams, SamplingParamsError

SMOL = ModelGeneration("HuggingFaceTB/Smollm2 135M 8k Lc100K Mix1 Ep2")


def test_the_default_models_card_values_and_the_files_own_win():
    assert SMOL.defaults() == {"temperature": 0.2, "top_p": 0.9}
    assert ModelGeneration(SMOL.identity, {"temperature": 0.7, "do_sample": True}).defaults() == {"temperature": 0.7, "top_p": 0.9}
    assert ModelGeneration("someone/else", {"top_p": 0.0, "top_k": 20}).defaults() == {"top_k": 20}  # a value the engine refuses is skipped


def test_preferred_over_model_and_openai_mode_drops_the_model():
    assert request_defaults(SMOL, '{"temperature": 0.6, "top_k": 40}') == {"temperature": 0.6, "top_p": 0.9, "top_k": 40}
    assert request_defaults(None, None) == {}  # --sampling-defaults openai: SamplingParams' own (temperature 1, top_p 1)
    assert request_defaults(None, {"top_k": 5}) == {"top_k": 5}


def test_a_requests_own_fields_win_even_at_the_default_value():
    d = request_defaults(SMOL, None)
    sp = SamplingParams.from_dict(with_defaults({"temperature": 1.0}, d))
    assert (sp.temperature, sp.top_p) == (1.0, 0.9)
    assert SamplingParams.from_dict(with_defaults({"temperature": None}, d)).temperature == 0.2  # null: not sent
    assert SamplingParams.from_dict(with_defaults(None, d)).temperature == 0.2
    assert with_defaults(["junk"], d) == ["junk"]  # left for from_dict to refuse by name


def test_neutral_sampling_fields_are_dropped_and_others_refused_by_name():
    assert SamplingParams.from_dict({"n": 1, "no_stop_trim": False, "temperature": 0.5}).temperature == 0.5
    with pytest.raises(SamplingParamsError, match="no_stop_trim=true is not supported"):
        SamplingParams.from_dict({"no_stop_trim": True})
