"""Random JSON against the request schemas: only validation errors, and what HTTP accepts the engine accepts."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest, CompletionRequest, GenerateRequest
from sglang.srt.sampling.sampling_params import LIMITS, SamplingParams

SCALARS = st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=8)
JSON = st.recursive(SCALARS, lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=6), kids, max_size=4), max_leaves=12)
# values near every limit, of every type, under the real field names
FIELD_VALUES = st.sampled_from([0, 1, -1, 2, 1e-300, 1e300, -(2**63), 2**63, 2**64, 0.5, True, "x", None, [], {}, [-5], ["a"], {"5": 1}])
SAMPLING = st.dictionaries(st.sampled_from([*SamplingParams.__dataclass_fields__, "bogus"]), FIELD_VALUES, max_size=6)


def _only_validation_errors(model, body) -> object | None:
    try:
        return model.model_validate(body)
    except ValidationError:
        return None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=JSON)
def test_arbitrary_json_gives_a_request_or_a_validation_error(body):
    for model in (GenerateRequest, CompletionRequest, ChatCompletionRequest):
        _only_validation_errors(model, body)


@settings(max_examples=400, deadline=None)
@given(params=SAMPLING)
def test_sampling_params_the_http_layer_accepts_the_engine_accepts(params):
    req = _only_validation_errors(GenerateRequest, {"text": "hi", "sampling_params": params})
    if req is None:
        return
    sp = SamplingParams.from_dict(req.items()[0][2])  # raises if the two layers disagree
    for name, limit in LIMITS.items():
        v = getattr(sp, name)
        if v is not None and limit.kind is not bool:
            assert limit.lo <= v <= limit.hi


@settings(max_examples=200, deadline=None)
@given(params=SAMPLING)
def test_the_engine_never_raises_anything_but_its_own_error(params):
    from sglang.srt.sampling.sampling_params import SamplingParamsError

    try:
        SamplingParams.from_dict(json.loads(json.dumps(params)), vocab_size=100)
    except SamplingParamsError:
        pass
