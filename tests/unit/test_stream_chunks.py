"""A stream's chunks each carry the request as it stood with their own message, also when a consumer takes
several at once (a slow HTTP writer): cumulative text, completion tokens, log-probabilities, finish reason."""

from __future__ import annotations

from sglang.srt.entrypoints.engine import Engine
from sglang.srt.managers.tokenizer_manager import ReqState


def test_each_chunk_reports_its_own_message():
    st = ReqState("r", 5)
    st.add_message("Once", [11], None, {"logprobs": [(-0.5, [])], "cached_tokens": 2})
    st.add_message(" upon", [12], None, {"logprobs": [(-0.25, [])], "cached_tokens": 2})
    st.finished = {"type": "length"}
    st.add_message(" a", [13], st.finished, {"logprobs": [(-1.0, [])], "cached_tokens": 2})
    got = [Engine._result(st, c) for c in st.chunks]
    assert [g["text"] for g in got] == ["Once", "Once upon", "Once upon a"]
    assert [g["output_ids"] for g in got] == [[11], [11, 12], [11, 12, 13]]
    assert [g["meta_info"]["completion_tokens"] for g in got] == [1, 2, 3]
    assert [g["meta_info"]["finish_reason"] for g in got] == [None, None, {"type": "length"}]
    assert [len(g["meta_info"]["output_token_logprobs"]) for g in got] == [1, 2, 3]
    assert got[1]["meta_info"]["output_token_logprobs"][-1] == (-0.25, 12, None)
    whole = Engine._result(st)  # the request as it stands: the last chunk's view
    assert whole["text"] == got[-1]["text"] and whole["meta_info"]["completion_tokens"] == 3
