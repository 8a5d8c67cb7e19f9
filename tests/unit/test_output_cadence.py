"""When the scheduler sends a request's tokens to the detokenizer (``scheduler_output.due``): a streaming request
its first token at once, then every ``--stream-interval`` tokens; a request that does not stream when it
finishes, or every ``FORCE_STREAM_INTERVAL`` tokens; a finished request always, with everything unsent."""

from __future__ import annotations

from sglang.srt.layers.sampler import RequestSampler
from sglang.srt.managers.schedule_batch import Req
from sglang.srt.managers.scheduler_output import FORCE_STREAM_INTERVAL, build_output
from sglang.srt.sampling.sampling_params import SamplingParams


def _req(stream: bool, rid: str = "r") -> Req:
    sp = SamplingParams.from_dict({"max_new_tokens": 500}, 100)
    return Req(rid, [1, 2], sp, RequestSampler(sp, 0, 1), stream)


def _step(r: Req, *tokens: int) -> None:
    r.output_ids += tokens
    r.pending += tokens


def _sent(reqs: list[Req], interval: int = 1) -> list[tuple[str, list[int]]]:
    out = build_output(reqs, interval)
    return [] if out is None else list(zip(out.rids, out.new_token_ids))


def test_a_streaming_request_sends_every_step_by_default():
    r = _req(True)
    for t in range(5):
        _step(r, t)
        assert _sent([r]) == [("r", [t])]


def test_stream_interval_sends_the_first_token_at_once_then_chunks():
    r = _req(True)
    _step(r, 0)
    assert _sent([r], 4) == [("r", [0])]  # time to first token does not wait for a chunk
    for t in (1, 2, 3):
        _step(r, t)
        assert _sent([r], 4) == []
    _step(r, 4)
    assert _sent([r], 4) == [("r", [1, 2, 3, 4])]
    _step(r, 5, 6, 7, 8, 9)  # a verify step that emitted five: all of them, at once
    assert _sent([r], 4) == [("r", [5, 6, 7, 8, 9])]


def test_a_request_that_does_not_stream_sends_on_finishing_or_every_force_interval():
    r = _req(False)
    for t in range(FORCE_STREAM_INTERVAL - 1):
        _step(r, t)
        assert _sent([r]) == []
    _step(r, 99)
    sent = _sent([r])
    assert sent == [("r", [*range(FORCE_STREAM_INTERVAL - 1), 99])]
    _step(r, 7)
    assert _sent([r]) == []
    r.finished_reason = {"type": "length", "length": FORCE_STREAM_INTERVAL + 1}
    assert _sent([r]) == [("r", [7])]


def test_a_finished_request_is_sent_even_with_nothing_pending_and_others_wait():
    quiet, streaming, done = _req(False, "q"), _req(True, "s"), _req(False, "d")
    _step(quiet, 1)
    _step(streaming, 2)
    done.finished_reason = {"type": "abort"}
    assert _sent([quiet, streaming, done]) == [("s", [2]), ("d", [])]
    assert quiet.pending == [1]  # kept for its next message
