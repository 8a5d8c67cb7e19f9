"""The scheduler in-process on the default model (fp32): batching, chunked prefill,
prefix cache, retraction, policies, stops, aborts, and the hook targets' real work."""

from __future__ import annotations

import itertools
import logging

import pytest

from sglang.srt.managers.io_struct import BatchTokenIDOut, SchedulerError, TokenizedGenerateReqInput
from sglang.srt.managers.scheduler import Scheduler
from sglang.srt.runtime_context import get_context, get_schedule, publish
from sglang.srt.server_args import ServerArgs
from sglang.utils.process import free_port

PROMPTS = ["What is the capital of France?", "Write a haiku about the sea.", "List three colors.", "What is 2+2?"]
_rid = itertools.count()


@pytest.fixture(scope="module")
def sched():
    # pages of 16 tokens: page rounding in admission, retraction and prefix matching (pages of 1,
    # the default, share the chat template's common prefix between these prompts, which leaves no KV pressure)
    sa = ServerArgs(dtype="float32", max_total_tokens=8192, chunked_prefill_size=512, page_size=16, log_level="warning")
    publish(sa, role="scheduler")
    return Scheduler(sa, 0, 0, f"tcp://127.0.0.1:{free_port()}")


def chat(s: Scheduler, text: str) -> list[int]:
    return s.tokenizer.encode(s.tokenizer.apply_chat_template([{"role": "user", "content": text}]))


def run(s: Scheduler, prompts: list[list[int]], **params) -> dict[str, dict]:
    params = {"temperature": 0, "max_new_tokens": 16, "ignore_eos": True, **params}
    rids = []
    for ids in prompts:
        rid = f"r{next(_rid)}"
        rids.append(rid)
        s.add_request(TokenizedGenerateReqInput(rid, ids, params))
    while s.has_work():
        s.step()
    out: dict[str, dict] = {r: {"ids": [], "reason": None, "cached": 0} for r in rids}
    for o in s.outbox:
        if isinstance(o, BatchTokenIDOut):
            for rid, ids, reason, cached in zip(o.rids, o.new_token_ids, o.finished_reasons, o.cached_tokens):
                if rid in out:
                    out[rid]["ids"] += ids
                    out[rid]["reason"] = reason or out[rid]["reason"]
                    out[rid]["cached"] = cached
        elif isinstance(o, SchedulerError):
            out.setdefault(o.rid, {})["error"] = o.message
    s.outbox.clear()
    return {r: out[r] for r in rids}


@pytest.fixture(scope="module")
def singles(sched):
    sched.tree.reset()
    return [next(iter(run(sched, [chat(sched, p)]).values()))["ids"] for p in PROMPTS]


def test_batched_equals_single(sched, singles):
    sched.tree.reset()
    got = [r["ids"] for r in run(sched, [chat(sched, p) for p in PROMPTS]).values()]
    assert got == singles


def test_chunked_prefill_equals_single(sched, singles):
    sched.tree.reset()
    with get_schedule().override(chunked_prefill_size=16):
        got = [r["ids"] for r in run(sched, [chat(sched, p) for p in PROMPTS]).values()]
    assert got == singles


def test_prefix_cache_hits_and_gives_the_same_tokens(sched, singles):
    sched.tree.reset()
    first = run(sched, [chat(sched, PROMPTS[0])])
    again = run(sched, [chat(sched, PROMPTS[0])])
    (a,), (b,) = first.values(), again.values()
    assert a["cached"] == 0 and b["cached"] >= 16 and a["ids"] == b["ids"] == singles[0]


def _first_batch_sizes(s: Scheduler, prompts: list[list[int]]) -> list[int]:
    """Requests in each prefill batch while ``prompts`` are admitted (decode steps skipped)."""
    sizes = []
    for ids in prompts:
        s.add_request(TokenizedGenerateReqInput(f"r{next(_rid)}", ids, {"temperature": 0, "max_new_tokens": 2, "ignore_eos": True}))
    while s.has_work():
        batch = s.get_next_batch_to_run()
        if batch is None:
            continue
        if batch.mode.name == "EXTEND":
            sizes.append(len(batch.reqs))
        s.process_batch_result(batch, s.run_batch(batch))
    s.outbox.clear()
    return sizes


def test_prompts_sharing_an_uncached_prefix_compute_it_once(sched, singles):
    """The chat template's system prompt is 29 tokens, one 16-token page shared by all four prompts: the first
    prompt is prefilled alone, the other three wait one step and read that page from the cache; with the
    threshold at 0 all four are prefilled together, each computing it. The answers are the same either way."""
    ids = [chat(sched, p) for p in PROMPTS]
    assert len({tuple(i[:16]) for i in ids}) == 1 and len({tuple(i[:32]) for i in ids}) == 4
    sched.tree.reset()
    assert _first_batch_sizes(sched, ids) == [1, 3]
    sched.tree.reset()
    got = run(sched, ids)
    assert [r["cached"] for r in got.values()] == [0, 16, 16, 16]
    assert [r["ids"] for r in got.values()] == singles
    sched.tree.reset()
    was, sched.in_batch_share_min = sched.in_batch_share_min, 0
    try:
        assert _first_batch_sizes(sched, ids) == [4]
        sched.tree.reset()
        got = run(sched, ids)
    finally:
        sched.in_batch_share_min = was
    assert [r["cached"] for r in got.values()] == [0, 0, 0, 0]
    assert [r["ids"] for r in got.values()] == singles


def test_retraction_under_kv_pressure_loses_nothing(sched, singles, caplog):
    sched.tree.reset()
    free = sched.allocator.available_pages()
    hog = sched.allocator.alloc(free - 9)  # leave 9 pages (144 tokens) for four requests
    try:
        with caplog.at_level(logging.INFO, logger="sglang.srt.managers.scheduler"):
            got = [r["ids"] for r in run(sched, [chat(sched, p) for p in PROMPTS]).values()]
    finally:
        sched.allocator.free(hog)
    assert "retracted request" in caplog.text
    assert got == singles


def test_lpm_policy_admits_the_longest_cached_prefix_first(sched):
    from sglang.srt.managers.schedule_policy import order_waiting

    sched.tree.reset()
    run(sched, [chat(sched, PROMPTS[1])])
    cold = TokenizedGenerateReqInput("cold", sched.tokenizer.encode("Unrelated text about trains and rivers."), {"max_new_tokens": 1})
    warm = TokenizedGenerateReqInput("warm", chat(sched, PROMPTS[1]), {"max_new_tokens": 1})
    sched.add_request(cold)
    sched.add_request(warm)
    try:
        assert [r.rid for r in order_waiting(sched.waiting, "lpm", sched.tree)] == ["warm", "cold"]
        assert [r.rid for r in order_waiting(sched.waiting, "fcfs", sched.tree)] == ["cold", "warm"]
    finally:
        sched.abort("cold")
        sched.abort("warm")
        sched.outbox.clear()


def test_stop_conditions(sched):
    ids = chat(sched, "Count from one to ten, separated by commas.")
    full = next(iter(run(sched, [ids], max_new_tokens=24).values()))["ids"]
    stop = sched.tokenizer.decode(full[4:6])  # a stop string that appears mid-output
    r = next(iter(run(sched, [ids], max_new_tokens=24, stop=[stop]).values()))
    assert r["reason"] == {"type": "stop", "matched": stop} and r["ids"] == full[: len(r["ids"])] and len(r["ids"]) <= 6
    r = next(iter(run(sched, [ids], max_new_tokens=24, stop_token_ids=[full[2]]).values()))
    assert r["reason"] == {"type": "stop", "matched": full[2]} and r["ids"] == full[:3]
    r = next(iter(run(sched, [ids], max_new_tokens=5).values()))
    assert r["reason"] == {"type": "length", "length": 5} and r["ids"] == full[:5]


def test_eos_finishes_unless_ignored(sched):
    ids = chat(sched, PROMPTS[0])
    r = next(iter(run(sched, [ids], max_new_tokens=32, ignore_eos=False).values()))
    assert r["reason"]["type"] == "stop" and r["ids"][-1] in sched.eos_ids


def test_prompt_longer_than_the_context_is_rejected(sched):
    r = run(sched, [[5] * (sched.context_length + 1)])
    assert "this server takes at most" in next(iter(r.values()))["error"]


def test_radix_cache_can_be_disabled(sched, singles):
    from sglang.srt.runtime_context import RepublishWarning

    sa = ServerArgs(dtype="float32", max_total_tokens=2048, disable_radix_cache=True, log_level="warning")
    with get_context().preserve_config():
        with pytest.warns(RepublishWarning):
            publish(sa, role="scheduler")
        plain = Scheduler(sa, 0, 0, "unused: torch.distributed is already initialized")
        assert plain.tree is None
        first, again = (next(iter(run(plain, [chat(plain, PROMPTS[0])]).values())) for _ in range(2))
        assert first["ids"] == again["ids"] == singles[0] and again["cached"] == 0
        assert plain.allocator.available_pages() == plain.allocator.num_pages  # every page came back


def test_hook_targets_do_the_work(sched):
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType
    from sglang.testing.plugins import restored_hooks

    calls = []
    with restored_hooks():
        for name in ("get_next_batch_to_run", "run_batch", "process_batch_result"):
            HookRegistry.register(f"sglang.srt.managers.scheduler.Scheduler.{name}", lambda *a, name=name, **k: calls.append(name), HookType.BEFORE)
        HookRegistry.register("sglang.srt.managers.tp_worker.TpModelWorker.forward_batch_generation", lambda result, *a, **k: calls.append("forward") or None, HookType.AFTER)
        HookRegistry.apply_hooks()
        run(sched, [chat(sched, PROMPTS[3])], max_new_tokens=2)
    assert calls[:4] == ["get_next_batch_to_run", "run_batch", "forward", "process_batch_result"]
    assert calls.count("forward") == 2


def test_zero_new_tokens_finishes_without_a_forward(sched):
    before = sched.forward_ct
    r = next(iter(run(sched, [chat(sched, PROMPTS[3])], max_new_tokens=0).values()))
    assert r["ids"] == [] and r["reason"] == {"type": "length", "length": 0} and sched.forward_ct == before


PEOPLE = ('{"type": "array", "minItems": 2, "maxItems": 2, "items": {"type": "object", "additionalProperties": false, '
          '"required": ["name", "age"], "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"}}}}')


def test_jump_forward_appends_forced_tokens_in_fewer_steps_and_the_output_still_parses(sched):
    import json

    sched.tree.reset()
    prompt = chat(sched, "Two people as JSON.")
    got = {}
    for jump in (False, True):
        sched.jump_forward = jump
        before = sched.forward_ct
        (out,) = run(sched, [prompt], json_schema=PEOPLE, max_new_tokens=80, ignore_eos=False).values()
        got[jump] = (sched.forward_ct - before, sched.tokenizer.decode(out["ids"]), out["reason"])
    sched.jump_forward = True
    for _steps, text, reason in got.values():
        data = json.loads(text)
        assert len(data) == 2 and all(set(p) == {"name", "age"} for p in data) and reason["type"] == "stop"
    assert got[True][0] < got[False][0] * 0.8, got  # '[{"name": "', '", "age": ' ... cost no decode step


def test_a_complete_grammar_stops_the_request_even_with_ignore_eos(sched):
    (out,) = run(sched, [chat(sched, "A year?")], regex="(19|20)[0-9]{2}", max_new_tokens=30, ignore_eos=True).values()
    text = sched.tokenizer.decode(out["ids"])
    assert len(text) == 4 and text.isdigit() and out["reason"]["type"] == "stop"


def test_a_request_aborted_while_its_grammar_compiles_ends_and_leaves_nothing(sched):
    sched.add_request(TokenizedGenerateReqInput("parked", chat(sched, "hi"), {"regex": "[a-z]{3,9} parked", "max_new_tokens": 8}))
    assert [r.rid for r in sched.grammars.holds()] == ["parked"]
    sched.abort("parked")
    assert sched.grammars.holds() == [] and "parked" not in sched.live
    (msg,) = [o for o in sched.outbox if isinstance(o, BatchTokenIDOut)]
    assert msg.rids == ["parked"] and msg.finished_reasons == [{"type": "abort"}]
    sched.outbox.clear()
    assert not sched.has_work()
