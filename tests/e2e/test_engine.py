"""The real engine: parity with Hugging Face, streaming, async, errors, lifecycle, TP."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

import sglang
from helpers.reference import hf_prompt_logprobs
from sglang.srt.managers.request_errors import EngineDeadError, RequestError

ROOT = Path(__file__).resolve().parents[2]
PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "List three primary colors.",
    "What is 12 times 12?",
    "Name a famous physicist.",
    "Translate 'good morning' into Spanish.",
    "What do bees make?",
    "Give me one tip for sleeping well.",
]
GREEDY = {"temperature": 0, "max_new_tokens": 24}


def _chat_ids(engine, text):
    tok = engine.tokenizer_manager.tokenizer
    return tok.encode(tok.apply_chat_template([{"role": "user", "content": text}]))


def test_greedy_tokens_equal_hugging_face_on_the_same_gguf(engine, hf_fp32):
    hf = hf_fp32
    ids = [_chat_ids(engine, p) for p in PROMPTS]
    ours = engine.generate(input_ids=ids, sampling_params=GREEDY)
    for prompt_ids, out in zip(ids, ours):
        with torch.inference_mode():
            ref = hf.generate(torch.tensor([prompt_ids]), max_new_tokens=24, do_sample=False)[0, len(prompt_ids):].tolist()
        eos = engine.tokenizer_manager.tokenizer.eos_token_ids
        ref = ref[: next((i + 1 for i, t in enumerate(ref) if t in eos), len(ref))]
        assert out["output_ids"] == ref


def test_single_prompt_result_shape(engine):
    r = engine.generate("The capital of France is", {"temperature": 0, "max_new_tokens": 8})
    assert r["text"] and len(r["output_ids"]) == r["meta_info"]["completion_tokens"] <= 8
    assert r["meta_info"]["prompt_tokens"] == len(engine.tokenizer_manager.tokenizer.encode("The capital of France is"))
    assert r["meta_info"]["finish_reason"]["type"] in ("length", "stop")
    assert r["text"] == engine.tokenizer_manager.tokenizer.decode(r["output_ids"])  # incremental detokenization is exact


def test_multibyte_text_streams_exactly(engine):
    p = {"temperature": 0, "max_new_tokens": 24, "ignore_eos": True}
    chunks = list(engine.generate("Write three emoji and the word café in French:", p, stream=True))
    assert "".join(c["delta"] for c in chunks) == engine.tokenizer_manager.tokenizer.decode(chunks[-1]["output_ids"])
    assert all("\ufffd" not in c["delta"] for c in chunks[:-1])


def test_streaming_deltas_add_up_to_the_full_text(engine):
    full = engine.generate("Count: one, two,", {"temperature": 0, "max_new_tokens": 12, "ignore_eos": True})
    chunks = list(engine.generate("Count: one, two,", {"temperature": 0, "max_new_tokens": 12, "ignore_eos": True}, stream=True))
    assert len(chunks) >= 8 and "".join(c["delta"] for c in chunks) == full["text"] == chunks[-1]["text"]  # token by token


def test_async_generate_equals_sync(engine):
    sync = engine.generate("Hello there,", GREEDY)

    async def both():
        one = await engine.async_generate("Hello there,", GREEDY)
        parts = [c["delta"] async for c in await engine.async_generate("Hello there,", GREEDY, stream=True)]
        return one, parts

    one, parts = asyncio.run(both())
    assert one["text"] == sync["text"] == "".join(parts) and len(parts) > 2  # streamed as it is generated


def test_stream_chunks_carry_only_the_new_part_and_wait_request_builds_nothing(engine):
    """The OpenAI streams read the manager's chunk records (new text and ids, lengths so far), not upstream's cumulative
    results; joined they are the whole answer, and their lengths count up to it. Cancelling a wait aborts the request."""
    tm = engine.tokenizer_manager
    p = {"temperature": 0, "max_new_tokens": 12, "ignore_eos": True, "logprobs": True}
    full = engine.generate("Count: one, two,", p)

    async def run():
        st = await engine.aopen_request("Count: one, two,", p, stream=True)
        chunks = [c async for c in engine.stream_chunks(st)]
        waited = await engine.wait_request(await engine.aopen_request("Count: one, two,", p))
        long = await engine.aopen_request("Tell me a long story.", {"max_new_tokens": 2000, "ignore_eos": True})
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(engine.wait_request(long), 0.5)
        return st, chunks, waited, long

    st, chunks, waited, long = asyncio.run(run())
    assert len(chunks) >= 8 and "".join(c["text"] for c in chunks) == full["text"]
    assert sum(len(c["token_ids"]) for c in chunks) == len(full["output_ids"]) == chunks[-1]["n_out"]
    assert [c["n_out"] for c in chunks] == sorted(c["n_out"] for c in chunks) and chunks[-1]["finished"] is not None
    assert engine.result(st)["meta_info"]["output_token_logprobs"] == full["meta_info"]["output_token_logprobs"]
    assert waited.finished is not None and waited.text == full["text"]
    deadline = time.monotonic() + 60  # the cancelled wait aborted the long request (2000 tokens take far longer)
    while time.monotonic() < deadline and long.rid in tm.states:
        time.sleep(0.05)
    assert long.rid not in tm.states and long.finished is not None and len(long.output_ids) < 2000


def test_a_caller_cancelled_while_its_request_is_being_submitted_leaves_nothing_running(engine):
    """The HTTP server cancels the coroutine of a client that disconnected; if that lands while the submit
    thread is still tokenizing, the request the thread then sends must be aborted, not run on unread."""
    tm = engine.tokenizer_manager
    before = tm.metrics.aborted._value.get()
    params = {"temperature": 0, "max_new_tokens": 2000, "ignore_eos": True}

    async def cancel_mid_submit():
        task = asyncio.ensure_future(engine.aopen_request("Tell me a long story. " * 200, params))
        await asyncio.sleep(0)  # the submit thread has started; its tokenization takes longer than this
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_mid_submit())
    deadline = time.monotonic() + 60  # generous: CI machines run loaded
    while time.monotonic() < deadline and (tm.states or tm.metrics.aborted._value.get() == before):
        time.sleep(0.05)
    assert tm.metrics.aborted._value.get() == before + 1
    assert not tm.states  # the scheduler finished it as aborted (2000 tokens would take far longer)


def test_seeded_sampling_is_reproducible(engine):
    p = {"temperature": 1.0, "top_p": 0.9, "seed": 1234, "max_new_tokens": 16}
    assert engine.generate("Once upon a time", p)["output_ids"] == engine.generate("Once upon a time", p)["output_ids"]


def test_logprobs_are_returned_on_request(engine):
    r = engine.generate("Hi", {"temperature": 0, "max_new_tokens": 3, "logprobs": True, "top_logprobs_num": 2})
    lps = r["meta_info"]["output_token_logprobs"]  # upstream's [logprob, token_id, text-or-None] triples
    assert [t for _, t, _ in lps] == r["output_ids"] and all(lp <= 0 and txt is None for lp, _, txt in lps)
    tops = r["meta_info"]["output_top_logprobs"]
    assert all(len(top) == 2 and top[0][1] == t for top, t in zip(tops, r["output_ids"]))  # greedy: the top-1 is the token


@pytest.mark.parametrize("start", [0, 5])
def test_prompt_logprobs_equal_transformers_float32_log_softmax(engine, hf_fp32, start):
    ids = engine.tokenizer_manager.tokenizer.encode("The quick brown fox jumps over the lazy dog because it was bored")
    r = engine.generate(input_ids=ids, sampling_params={"max_new_tokens": 2, "temperature": 0, "logprobs": True,
                                                          "top_logprobs_num": 3, "logprob_start_len": start})
    meta = r["meta_info"]
    got = meta["input_token_logprobs"]
    ref, logp = hf_prompt_logprobs(hf_fp32, ids)
    if start == 0:
        assert got[0] == (None, ids[0], None) and meta["input_top_logprobs"][0] is None
        got, tops = got[1:], meta["input_top_logprobs"][1:]
    else:
        tops = meta["input_top_logprobs"]
    first = max(1, start)
    assert [t for _, t, _ in got] == ids[first:]
    assert max(abs(lp - want) for (lp, _, _), want in zip(got, ref[first - 1:])) < 1e-3
    for pos, top in zip(range(first, len(ids)), tops):
        assert [t for _, t, _ in top] == logp[pos - 1].topk(3).indices.tolist()


def test_prompt_logprobs_with_no_new_tokens_and_a_cached_prefix(engine, hf_fp32):
    ids = engine.tokenizer_manager.tokenizer.encode("One two three four five six seven eight nine ten eleven twelve thirteen " * 3)
    engine.generate(input_ids=ids, sampling_params={"max_new_tokens": 1, "temperature": 0})  # fills the prefix cache
    r = engine.generate(input_ids=ids, sampling_params={"max_new_tokens": 0, "logprobs": True, "logprob_start_len": 0})
    assert r["output_ids"] == [] and r["meta_info"]["finish_reason"] == {"type": "length", "length": 0}
    ref, _ = hf_prompt_logprobs(hf_fp32, ids)
    got = [lp for lp, _, _ in r["meta_info"]["input_token_logprobs"][1:]]
    assert len(got) == len(ids) - 1 and max(abs(a - b) for a, b in zip(got, ref)) < 1e-3


def test_a_logprob_start_len_past_the_prompt_is_a_request_error(engine):
    with pytest.raises(RequestError, match="logprob_start_len 50 must be below the prompt length"):
        engine.generate(input_ids=[1, 2, 3], sampling_params={"logprobs": True, "logprob_start_len": 50})


def test_upstreams_logprob_keywords_equal_the_sampling_params_route(engine):
    """Code written for upstream's Engine passes return_logprob / top_logprobs_num / logprob_start_len at the top level."""
    prompt, p = "The capital of France is", {"temperature": 0, "max_new_tokens": 4}
    ours = engine.generate(prompt, {**p, "logprobs": True, "top_logprobs_num": 3, "logprob_start_len": 2})["meta_info"]
    theirs = engine.generate(prompt, p, return_logprob=True, top_logprobs_num=3, logprob_start_len=2)["meta_info"]
    for key in ("input_token_logprobs", "output_token_logprobs", "input_top_logprobs", "output_top_logprobs"):
        assert len(theirs[key]) == len(ours[key]) > 0, key
    for kind in ("output", "input"):
        for a, b in zip(theirs[f"{kind}_token_logprobs"], ours[f"{kind}_token_logprobs"]):
            assert isinstance(a, tuple) and a[1:] == b[1:] and a[2] is None and a[0] == pytest.approx(b[0], abs=1e-4)  # (logprob, id, None)
        for a, b in zip(theirs[f"{kind}_top_logprobs"], ours[f"{kind}_top_logprobs"]):
            assert len(a) == 3 and [t for _, t, _ in a] == [t for _, t, _ in b]
    assert asyncio.run(engine.async_generate(prompt, p, return_logprob=True))["meta_info"]["output_token_logprobs"]


def test_a_batch_takes_upstreams_keywords_one_per_prompt(engine):
    p = {"temperature": 0, "max_new_tokens": 3}
    a, b = engine.generate(["Hi", "Hello"], p, return_logprob=[True, False], top_logprobs_num=[2, 0], rid=["kw-a", "kw-b"])
    assert a["meta_info"]["id"] == "kw-a" and b["meta_info"]["id"] == "kw-b"
    assert [t for _, t, _ in a["meta_info"]["output_token_logprobs"]] == a["output_ids"]
    assert all(len(top) == 2 for top in a["meta_info"]["output_top_logprobs"])
    assert "output_token_logprobs" not in b["meta_info"]
    both = asyncio.run(engine.async_generate(["Hi", "Hello"], p, return_logprob=True, rid=["kw-c", "kw-d"]))  # as upstream's, a batch
    assert [r["meta_info"]["id"] for r in both] == ["kw-c", "kw-d"]
    assert [r["output_ids"] for r in both] == [a["output_ids"], b["output_ids"]]


@pytest.mark.parametrize(
    ("kwargs", "param", "message"),
    [
        ({"image_data": "cat.png"}, "image_data", "image_data='cat.png' is not supported by this engine: multimodal inputs"),
        ({"return_hidden_states": True}, "return_hidden_states", "hidden states are not returned; pass False or leave it out"),
        ({"sampling_params": {"logprobs": False}, "return_logprob": True}, "return_logprob",
         r"return_logprob=True and sampling_params\['logprobs'\]=False disagree"),
        ({"bootstrap_host": "10.0.0.1", "bootstrap_port": 8998, "bootstrap_room": 1}, "bootstrap_room",
         "bootstrap_room are for disaggregated servers; this one runs with --disaggregation-mode null"),
    ],
)
def test_an_upstream_keyword_this_engine_cannot_honour_names_itself(engine, kwargs, param, message):
    for call in (lambda: engine.generate("Hi", **kwargs), lambda: asyncio.run(engine.async_generate("Hi", **kwargs))):
        with pytest.raises(RequestError, match=message) as info:
            call()
        assert info.value.param == param
    assert not engine.tokenizer_manager.states  # nothing was sent


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"prompt": "x", "sampling_params": {"temperature": -1}}, r"temperature must be in \[0, 1e\+06\], got -1"),
        ({"prompt": "", "sampling_params": {}}, "prompt must be a non-empty string"),
        ({"input_ids": [10**9], "sampling_params": {}}, "input_ids must be a non-empty list of token ids"),
        ({"prompt": "word " * 9000, "sampling_params": {}}, "exceeds the context of"),
        # the bodies that killed the scheduler or the detokenizer before: sglang.Engine bypasses HTTP, so the engine checks too
        ({"prompt": "x", "sampling_params": {"skip_special_tokens": "junk"}}, "'skip_special_tokens' must be true or false"),
        ({"prompt": "x", "sampling_params": {"seed": 2**64}}, r"seed must be in \[-2\*\*63, 2\*\*63-1\]"),
        ({"prompt": "x", "sampling_params": {"repetition_penalty": 1e-300}}, r"repetition_penalty must be in \[0.01, 2\]"),
        ({"prompt": "x", "sampling_params": {"stop_token_ids": [49152]}}, r"token ids must be integers in \[0, 49152\)"),
        ({"prompt": "h\ud800i", "sampling_params": {}}, "prompt is not valid Unicode text"),
    ],
)
def test_bad_requests_raise_and_the_engine_keeps_serving(engine, kwargs, message):
    with pytest.raises(RequestError, match=message):
        engine.generate(**kwargs)
    assert engine.generate("Still alive?", {"max_new_tokens": 2})["output_ids"]


def test_a_rid_names_one_running_request_whoever_submits_it(engine):
    """The HTTP server checks a named rid early, but callers that reach the manager directly (the Engine's own
    paths, plugins) pass only its check: it refuses a rid that is running, and takes it again once it ends."""
    tm = engine.tokenizer_manager
    params = {"temperature": 0, "max_new_tokens": 2000, "ignore_eos": True}
    first = tm.submit("Count:", params, rid="one-rid")
    with pytest.raises(RequestError, match="a request with rid 'one-rid' is already running") as err:
        tm.submit("Count:", params, rid="one-rid")
    assert err.value.param == "rid" and tm.states["one-rid"] is first
    tm.abort("one-rid")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and "one-rid" in tm.states:
        time.sleep(0.05)
    assert first.finished is not None and first.finished["type"] == "abort"
    again = tm.submit("Count:", {"temperature": 0, "max_new_tokens": 2}, rid="one-rid")
    assert engine._wait(again)["meta_info"]["completion_tokens"] == 2


def test_peak_rss_of_the_scheduler_stays_under_1_5_gb(engine):
    engine.generate(["Tell me a story."] * 16, {"max_new_tokens": 32, "ignore_eos": True})
    sched = next(p for p in engine.procs if "scheduler" in p.name)
    hwm = next(line for line in Path(f"/proc/{sched.pid}/status").read_text().splitlines() if line.startswith("VmHWM"))
    assert int(hwm.split()[1]) * 1024 < 1.5 * 2**30, hwm


SCRIPT = """
import sglang
if __name__ == "__main__":
    with sglang.Engine(log_level="warning", max_total_tokens=2048) as e:
        print("generated:", len(e.generate("Hi", {"max_new_tokens": 2})["output_ids"]))
"""


def test_general_plugin_quickstart_runs_in_the_scheduler(tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index", "--target", str(target),
                    str(ROOT / "examples" / "plugins" / "my_general_plugin")], check=True, capture_output=True)
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(SCRIPT))
    env = {**os.environ, "PYTHONPATH": str(target), "SGLANG_QUIET_LOAD": "1"}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "Scheduler initialized! gpu_id=0" in proc.stdout and "generated: 2" in proc.stdout


def test_a_dead_child_is_reported_within_seconds_and_nothing_outlives_the_engine():
    e = sglang.Engine(log_level="error", max_total_tokens=2048)
    try:
        sched = next(p for p in e.procs if "scheduler" in p.name)
        os.kill(sched.pid, signal.SIGKILL)
        t0 = time.monotonic()
        with pytest.raises(EngineDeadError, match=r"sglang-scheduler-TP0 \(pid \d+\) exited with code -9"):
            e.generate("Hi", {"max_new_tokens": 64})
        assert time.monotonic() - t0 < 5
    finally:
        e.shutdown()
    assert all(not p.is_alive() for p in e.procs)


def test_tensor_parallel_two_ranks_equals_one(engine, tiny_tp_model):
    ids = [_chat_ids(engine, p) for p in PROMPTS[:3]]
    params = {"temperature": 0, "max_new_tokens": 16, "ignore_eos": True}
    outs = []
    for tp in (1, 2):
        with sglang.Engine(model_path=str(tiny_tp_model), dtype="float32", tp_size=tp, log_level="warning", max_total_tokens=2048) as e:
            outs.append([r["output_ids"] for r in e.generate(input_ids=ids, sampling_params=params)])
    assert outs[0] == outs[1] and len(outs[0][0]) == 16


def test_tp_that_does_not_divide_the_heads_fails_start_up_with_the_reason():
    with pytest.raises(EngineDeadError, match="--tp-size 2 must divide the 9 attention heads and 3 KV heads"):
        sglang.Engine(tp_size=2, log_level="error", max_total_tokens=2048)


def test_bfloat16_with_packed_q4_weights_keeps_the_answer(engine):
    ids = _chat_ids(engine, PROMPTS[0])
    with sglang.Engine(dtype="bfloat16", quantization="gguf_q4", log_level="warning", max_total_tokens=2048) as fast:
        out = fast.generate(input_ids=ids, sampling_params={"temperature": 0, "max_new_tokens": 8})
    assert "Paris" in out["text"]


def test_the_default_q4_blocks_give_the_reference_modes_greedy_tokens(engine):
    # no flags: the GGUF's Q4 blocks computed as the very float32 weights --quantization none holds
    # dense (q4_f32), so only sums reorder; at batch 1 and batch 4
    assert engine.info["quantization"] == "gguf_q4" and engine.info["weight_format"] == "120 x q4_f32; 1 x q8_f32"
    ids = [_chat_ids(engine, p) for p in PROMPTS[:4]]
    params = {"temperature": 0, "max_new_tokens": 16, "ignore_eos": True}
    got = [r["output_ids"] for r in engine.generate(input_ids=ids[:1], sampling_params=params)]
    got += [r["output_ids"] for r in engine.generate(input_ids=ids, sampling_params=params)]
    with sglang.Engine(dtype="float32", quantization="none", log_level="warning", max_total_tokens=2048) as ref:
        assert ref.info["quantization"] is None and ref.info["weight_format"] == "121 x onednn"
        want = [r["output_ids"] for r in ref.generate(input_ids=ids[:1], sampling_params=params)]
        want += [r["output_ids"] for r in ref.generate(input_ids=ids, sampling_params=params)]
    assert [len(t) for t in want] == [16] * 5
    assert got == want


def test_packed_q4_in_float16_fails_start_up_with_the_fix():
    with pytest.raises(EngineDeadError, match="add --dtype bfloat16 or --dtype float32"):
        sglang.Engine(dtype="float16", quantization="gguf_q4", log_level="error", max_total_tokens=2048)


NODE1 = """
import sys

import sglang

if __name__ == "__main__":
    e = sglang.Engine(model_path=sys.argv[1], dtype="float32", tp_size=2, nnodes=2, node_rank=1, dist_init_addr=sys.argv[2],
                      log_level="warning", max_total_tokens=2048)
    e.wait()
"""


def test_two_nodes_join_through_dist_init_addr(engine, tiny_tp_model, tmp_path):
    from sglang.utils.process import free_port

    ids = [_chat_ids(engine, p) for p in PROMPTS[:2]]
    params = {"temperature": 0, "max_new_tokens": 8, "ignore_eos": True}
    with sglang.Engine(model_path=str(tiny_tp_model), dtype="float32", log_level="warning", max_total_tokens=2048) as one:
        expected = [r["output_ids"] for r in one.generate(input_ids=ids, sampling_params=params)]
    addr = f"127.0.0.1:{free_port()}"
    script = tmp_path / "node1.py"
    script.write_text(textwrap.dedent(NODE1))
    node1 = subprocess.Popen([sys.executable, str(script), str(tiny_tp_model), addr], env={**os.environ, "SGLANG_QUIET_LOAD": "1"})
    try:
        with sglang.Engine(model_path=str(tiny_tp_model), dtype="float32", tp_size=2, nnodes=2, node_rank=0, dist_init_addr=addr,
                           log_level="warning", max_total_tokens=2048) as node0:
            got = [r["output_ids"] for r in node0.generate(input_ids=ids, sampling_params=params)]
    finally:
        node1.kill()
        node1.wait(10)
    assert got == expected


POST_INIT_PLUGIN = '''
from sglang.srt.plugins.hook_registry import HookRegistry, HookType


def _seen(server_args):
    print(f"post_init hook saw max_total_tokens={server_args.max_total_tokens}", flush=True)


def register():
    HookRegistry.register("sglang.srt.server_args.ServerArgs.__post_init__", _seen, HookType.BEFORE)
'''


def test_a_hook_on_server_args_post_init_applies_under_engine_as_under_serve(tmp_path):
    # regression: sglang.Engine(...) built its ServerArgs before load_plugins(), so this hook never ran there
    from helpers.dists import make_dist, ok, run_python

    make_dist(tmp_path, "acme-postinit", entry_points={"sglang.srt.plugins": {"postinit": "acme_postinit:register"}},
              files={"acme_postinit/__init__.py": POST_INIT_PLUGIN})
    out = ok(run_python("""
        import sglang
        if __name__ == "__main__":
            with sglang.Engine(max_total_tokens=1024, log_level="error") as e:
                print("generated", len(e.generate("Hi", {"max_new_tokens": 2})["output_ids"]))
        """, paths=[tmp_path], timeout=300))
    assert "post_init hook saw max_total_tokens=1024" in out and "generated 2" in out


LATE_HOOK_PLUGIN = '''
import os

from sglang.srt.plugins.hook_registry import HookRegistry, HookType


def _norm(result, self, x, *args, **kwargs):
    with open(os.environ["LATE_HOOK_LOG"], "a") as f:
        f.write(f"{x.shape[0]}\\n")
    return None


def _on_request(self, msg):
    # a hook applied while the engine serves: on the request that asks for exactly 3 tokens
    if msg.sampling_params.get("max_new_tokens") == 3 and "sglang.srt.layers.basic.RMSNorm.forward" not in HookRegistry.applied_targets():
        HookRegistry.register("sglang.srt.layers.basic.RMSNorm.forward", _norm, HookType.AFTER)
        HookRegistry.apply_hooks()


def register():
    HookRegistry.register("sglang.srt.managers.scheduler.Scheduler.add_request", _on_request, HookType.BEFORE)
'''


def test_a_hook_applied_after_the_engine_started_runs_on_the_next_request(tmp_path):
    # the fused decode step stands in for RMSNorm.forward: the runner sees the new hook and decodes eagerly
    from helpers.dists import make_dist, ok, run_python

    make_dist(tmp_path, "acme-late", entry_points={"sglang.srt.plugins": {"late": "acme_late:register"}},
              files={"acme_late/__init__.py": LATE_HOOK_PLUGIN})
    log = tmp_path / "norm.log"
    out = ok(run_python(f"""
        import os, sglang
        os.environ["LATE_HOOK_LOG"] = {str(log)!r}
        if __name__ == "__main__":
            with sglang.Engine(log_level="warning") as e:
                before = e.generate("Hi", {{"max_new_tokens": 2, "temperature": 0}})["output_ids"]
                print("calls before", len(open(os.environ["LATE_HOOK_LOG"]).read().split()) if os.path.exists(os.environ["LATE_HOOK_LOG"]) else 0)
                print("tokens", len(e.generate("Hello there, how are you?", {{"max_new_tokens": 3, "temperature": 0}})["output_ids"]))
        """, paths=[tmp_path], timeout=300))
    assert "calls before 0" in out and "tokens 3" in out
    rows = [int(n) for n in log.read_text().split()]
    layers = 30  # SmolLM2-135M: two norms a layer and the final one, per forward
    assert len(rows) == 3 * (2 * layers + 1), len(rows)  # the prefill and both decode steps ran the hook
    assert rows[2 * layers + 1 :] == [1] * 2 * (2 * layers + 1)  # the two decode steps, one token each: the eager step ran them
    assert all(n > 1 for n in rows[: 2 * layers])  # first the prompt's prefill (its final norm sees the last row only)


def test_a_request_without_temperature_samples_at_the_default_models_card_values(engine):
    assert engine.tokenizer_manager.sampling_defaults == {"temperature": 0.2, "top_p": 0.9}
    prompt, base = "Write one sentence about the sea:", {"max_new_tokens": 24, "ignore_eos": True}
    runs = {seed: engine.generate(prompt, {**base, "seed": seed})["output_ids"] for seed in (1, 2, 3)}
    for seed, ids in runs.items():  # the defaults reach the sampler: the same tokens as the explicit values
        assert ids == engine.generate(prompt, {**base, "seed": seed, "temperature": 0.2, "top_p": 0.9})["output_ids"]
    # a request's own temperature wins, 1.0 included: with the same seeds it samples other tokens
    hot = [engine.generate(prompt, {**base, "seed": s, "temperature": 1.0, "top_p": 1.0})["output_ids"] for s in runs]
    assert hot != list(runs.values())
