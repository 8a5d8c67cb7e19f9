"""The speculator's cost meter on a real NGRAM scheduler (the default configuration, in process): every decode-phase
forward of a lone request is timed into it, verifies by their width; the table it fits is the host's at the measured
level; and the draft policy prices drafts by the table in force."""

from __future__ import annotations

import pytest

from sglang.srt.managers.io_struct import BatchTokenIDOut, TokenizedGenerateReqInput
from sglang.srt.managers.scheduler import Scheduler
from sglang.srt.runtime_context import get_context
from sglang.srt.server_args import ServerArgs
from sglang.srt.speculative import cost_meter as cm
from sglang.srt.speculative.draft_policy import CostTable, verify_costs
from sglang.utils.process import free_port

pytestmark = pytest.mark.model

PASSAGE = ("The lighthouse keeper climbed the spiral stairs every evening at dusk, carrying a lantern, a flask of tea "
           "and a notebook in which he wrote the colour of the sea, the direction of the wind and the names of the ships "
           "that passed the rocks below.")


def generate(s: Scheduler, rid: str, text: str, n: int) -> dict:
    ids = s.tokenizer.encode(s.tokenizer.apply_chat_template([{"role": "user", "content": text}]))
    s.add_request(TokenizedGenerateReqInput(rid, ids, {"temperature": 0, "max_new_tokens": n, "ignore_eos": True}))
    while s.has_work():
        s.step()
    return next(o.spec[i] for o in s.outbox if isinstance(o, BatchTokenIDOut) for i, r in enumerate(o.rids) if r == rid and o.finished_reasons[i])


def test_verifies_and_plain_steps_feed_the_meter_and_price_the_policy(monkeypatch):
    monkeypatch.delenv("SGLANG_CPU_GGUF_MATH")  # the suite's float32 (tests/conftest.py): the default's kernels
    monkeypatch.delenv(cm.CALIBRATION_ENV, raising=False)
    with get_context().preserve_config():
        sa = ServerArgs(max_total_tokens=4096, log_level="warning", speculative_algorithm="NGRAM")
        get_context().publish(sa, role="scheduler", warn=False)
        s = Scheduler(sa, 0, 0, f"tcp://127.0.0.1:{free_port()}")
        meter = s.spec.meter
        assert meter.enabled and meter.prior == verify_costs() and meter.table == CostTable.of(meter.prior)
        chat = generate(s, "chat", "Write a short poem about autumn leaves.", 24)  # mostly plain steps: the baseline
        copies = [generate(s, f"copy{i}", f"Repeat the following text exactly, word for word:\n\n{PASSAGE}", 64) for i in range(3)]
        # one timing per decode-phase step of a lone request (its plain rows and its verifies), each by its width
        assert meter.observed == chat["spec_verify_ct"] + sum(c["spec_verify_ct"] for c in copies)
        assert len(meter.decode) + sum(len(t) for t in meter.widths.values()) <= meter.observed
        copy = copies[0]
        assert copy["spec_num_proposed_drafts"] > 0 and meter.widths
        assert min(meter.widths) >= 2 and max(meter.widths) <= s.spec.max_drafts() + 1
        meter._fit()
        assert meter.measured(), (len(meter.decode), {w: len(t) for w, t in meter.widths.items()})
        assert meter.table.rows == tuple((r, 1.0 + (c - 1.0) * meter.scale) for r, c in meter.prior)
        # the policy reads the table in force: verify rows priced 50x dearer than the host's table draft nothing
        meter.enabled = False  # hold this table (no refit from the next steps)
        meter.table = CostTable.of(tuple((r, 1.0 + (c - 1.0) * 50) for r, c in meter.prior))
        again = generate(s, "again", f"Repeat the following text exactly, word for word:\n\n{PASSAGE}", 32)
    assert again["spec_num_proposed_drafts"] == 0 and again["spec_accept_histogram"] == [again["spec_verify_ct"]], again
