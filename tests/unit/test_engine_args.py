"""Upstream SGLang's ``Engine.generate`` keywords mapped onto this engine (``entrypoints/engine_args.py``), without an engine."""

from __future__ import annotations

import inspect

import pytest

from sglang.srt.entrypoints.engine import Engine
from sglang.srt.entrypoints.engine_args import _CALL_ARGS, MORE_KEYWORDS, NAMED_KEYWORDS, per_prompt
from sglang.srt.managers.request_errors import RequestError

# upstream's positional order of Engine.generate (the keywords a caller may also pass positionally)
UPSTREAM_ORDER = ["prompt", "sampling_params", "input_ids", "image_data", "return_logprob", "logprob_start_len", "top_logprobs_num",
                  "token_ids_logprob", "lora_path", "custom_logit_processor", "return_hidden_states", "stream", "bootstrap_host",
                  "bootstrap_port", "bootstrap_room", "data_parallel_rank", "rid"]  # fmt: skip


@pytest.mark.parametrize("method", [Engine.generate, Engine.async_generate])
def test_both_signatures_take_upstreams_order_and_every_parameter_is_read(method):
    params = list(inspect.signature(method).parameters)
    assert params == ["self", *UPSTREAM_ORDER, "more"]
    # from_call reads the locals() of the call by name: every parameter must be one it reads
    assert set(UPSTREAM_ORDER) == {"prompt", "input_ids", "sampling_params", *NAMED_KEYWORDS, *_CALL_ARGS}


def test_logprob_keywords_go_into_the_sampling_params_without_changing_the_callers_dict():
    sp = {"max_new_tokens": 4}
    (req,), batch = per_prompt("generate", "hi", None, sp, return_logprob=True, top_logprobs_num=3, logprob_start_len=0)
    assert not batch and req.text == "hi"
    assert req.sampling_params == {"max_new_tokens": 4, "logprobs": True, "top_logprobs_num": 3, "logprob_start_len": 0}
    assert sp == {"max_new_tokens": 4}
    (plain,), _ = per_prompt("generate", "hi", None, sp)
    assert plain.sampling_params is sp  # nothing asked: passed through as given


def test_a_batch_takes_one_value_per_prompt_or_one_for_all():
    reqs, batch = per_prompt("generate", ["a", "b", "c"], None, {"max_new_tokens": 2}, return_logprob=[True, False, True],
                             top_logprobs_num=[2, None, 0], logprob_start_len=1)  # fmt: skip
    assert batch and [r.text for r in reqs] == ["a", "b", "c"]
    assert [r.sampling_params for r in reqs] == [
        {"max_new_tokens": 2, "logprobs": True, "top_logprobs_num": 2, "logprob_start_len": 1},
        {"max_new_tokens": 2, "logprob_start_len": 1},  # return_logprob False: upstream's default, nothing asked
        {"max_new_tokens": 2, "logprobs": True, "top_logprobs_num": 0, "logprob_start_len": 1},
    ]
    reqs, batch = per_prompt("generate", None, [[1, 2], [3]], None, return_logprob=True)
    assert batch and [(r.input_ids, r.sampling_params) for r in reqs] == [([1, 2], {"logprobs": True}), ([3], {"logprobs": True})]


@pytest.mark.parametrize(
    ("kwargs", "param", "message"),
    [
        (
            {"sampling_params": {"logprobs": False}, "return_logprob": True},
            "return_logprob",
            r"return_logprob=True and sampling_params\['logprobs'\]=False disagree",
        ),
        (
            {"sampling_params": {"top_logprobs_num": 5}, "top_logprobs_num": 2},
            "top_logprobs_num",
            r"top_logprobs_num=2 and sampling_params\['top_logprobs_num'\]=5 disagree",
        ),
        ({"return_logprob": "yes"}, "return_logprob", "return_logprob must be True or False, got 'yes'"),
        ({"prompt": ["a", "b"], "top_logprobs_num": [1]}, "top_logprobs_num", "top_logprobs_num has 1 entries for 2 prompts"),
        ({"return_logprob": [True]}, "return_logprob", "return_logprob is a list, but the prompt is single"),
        ({"prompt": ["a", "b"], "stream": True}, "stream", "stream=True takes a single prompt"),
        ({"prompt": ["a", "b"], "rid": "r"}, "rid", "rid is one id for a batch of 2 prompts"),
        ({"prompt": ["a", "b"], "rid": ["r", "r"]}, "rid", "rid 'r' is used twice in this batch"),
        ({"rid": "busy"}, "rid", "rid 'busy' is used by a request that is still running"),
        ({"rid": ""}, "rid", "rid must be a non-empty string"),
        ({"refused": {"image_data": "cat.png"}}, "image_data", "image_data='cat.png' is not supported by this engine: multimodal"),
        ({"refused": {"return_hidden_states": True}}, "return_hidden_states", "hidden states are not returned; pass False or leave it out"),
        ({"refused": {"token_ids_logprob": [5]}}, "token_ids_logprob", r"token_ids_logprob=\[5\] is not supported"),
        ({"refused": {"custom_logit_processor": "x"}}, "custom_logit_processor", "custom logit processors are not implemented"),
        ({"refused": {"data_parallel_rank": 1}}, "data_parallel_rank", "routing to a chosen data-parallel replica"),
        ({"refused": {"data_parallel_rank": 0}, "dp_size": 2}, "data_parallel_rank", "routing to a chosen data-parallel replica"),
        ({"refused": {"session_params": {"id": "s"}}}, "session_params", "sessions are not implemented"),
        ({"refused": {"external_trace_header": {"a": "b"}}}, "external_trace_header", "tracing is not implemented"),
    ],
)
def test_what_cannot_be_honoured_is_a_request_error_naming_the_argument(kwargs, param, message):
    kwargs = {"prompt": "hi", "input_ids": None, "sampling_params": None, "running": {"busy"}, **kwargs}
    with pytest.raises(RequestError, match=message) as info:
        per_prompt("generate", kwargs.pop("prompt"), kwargs.pop("input_ids"), kwargs.pop("sampling_params"), **kwargs)
    assert info.value.param == param


def test_the_value_that_means_nothing_is_served():
    refused = {"image_data": None, "token_ids_logprob": None, "custom_logit_processor": None, "return_hidden_states": False,
               "data_parallel_rank": 0, "audio_data": None, "priority": None}  # fmt: skip
    reqs, _ = per_prompt("generate", "hi", None, None, refused=refused, dp_size=1)  # rank 0 of one replica: the only one
    assert reqs[0].sampling_params is None
    per_prompt("generate", ["a", "b"], None, None, refused={"return_hidden_states": [False, False], "image_data": [None, None]})


def test_a_keyword_upstream_does_not_take_either_is_a_type_error():
    with pytest.raises(TypeError, match="generate\\(\\) got an unexpected keyword argument 'return_logprobs'"):
        per_prompt("generate", "hi", None, None, refused={"return_logprobs": True})
    assert "mm_hashes" in MORE_KEYWORDS


def test_rid_and_bootstrap_fields_are_honoured_per_prompt():
    reqs, _ = per_prompt("generate", ["a", "b"], None, None, rid=["x", "y"], bootstrap_host="10.0.0.1", bootstrap_port=8998,
                         bootstrap_room=2**63 - 1)  # fmt: skip
    assert [r.rid for r in reqs] == ["x", "y"]
    assert [r.bootstrap for r in reqs] == [{"host": "10.0.0.1", "port": 8998, "room": 2**63 - 1},
                                           {"host": "10.0.0.1", "port": 8998, "room": 0}]  # fmt: skip
    reqs, _ = per_prompt("generate", ["a", "b"], None, None, bootstrap_host=["h1", "h2"], bootstrap_port=1, bootstrap_room=[7, 9])
    assert [r.bootstrap for r in reqs] == [{"host": "h1", "port": 1, "room": 7}, {"host": "h2", "port": 1, "room": 9}]
    (one,), _ = per_prompt("generate", "a", None, None, rid="z", lora_path="adapter")
    assert (one.rid, one.bootstrap, one.lora_path) == ("z", None, "adapter")
