"""NGRAM speculative decoding in-process on the default model in the reference-exact mode (float32, no
quantization): two schedulers, one with ``--speculative-algorithm NGRAM`` and one without, give the same
greedy tokens (finish checks mid-draft included), free every KV page, and sample from the same
distribution at temperature 0.7."""

from __future__ import annotations

import itertools
import json
import math
import re

import pytest

from sglang.srt.managers.io_struct import BatchTokenIDOut, SchedulerError, TokenizedGenerateReqInput
from sglang.srt.managers.scheduler import Scheduler
from sglang.srt.runtime_context import get_context
from sglang.srt.server_args import ServerArgs
from sglang.utils.process import free_port

pytestmark = pytest.mark.model

PASSAGE = ("The lighthouse keeper climbed the spiral stairs every evening at dusk, carrying a lantern, a flask of tea "
           "and a notebook in which he wrote the colour of the sea, the direction of the wind and the names of the ships "
           "that passed the rocks below.")
CODE = "def area(width, height):\n    result = width * height\n    return result\n\n\nprint(area(3, 4))\n"
PROMPTS = [
    f"Repeat the following text exactly, word for word:\n\n{PASSAGE}",
    f"Rename the function area to rectangle_area in this code and print the whole code again:\n\n{CODE}",
    f"Read this passage and answer: what did the keeper carry?\n\n{PASSAGE}",
    "Write a short poem about autumn leaves.",
]
_rid = itertools.count()


def _build(**extra) -> Scheduler:
    sa = ServerArgs(dtype="float32", quantization="none", max_total_tokens=8192, page_size=4, log_level="warning", **extra)
    get_context().publish(sa, role="scheduler", warn=False)  # the second build re-publishes: last wins
    return Scheduler(sa, 0, 0, f"tcp://127.0.0.1:{free_port()}")


@pytest.fixture(autouse=True)
def _cheap_verify_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests check what speculation computes, not how long its drafts are: verify rows are priced by the
    avx512_vnni table (the cheaper rows, which draft the most) on every CPU, so an AVX2-only host drafts as much
    (the per-family choice has its own unit test, tests/unit/test_spec_ngram.py)."""
    from sglang.srt.speculative import draft_policy

    monkeypatch.setattr(draft_policy, "_host", lambda: ("avx512_vnni", "any CPU model"))


@pytest.fixture(scope="module")
def pair() -> tuple[Scheduler, Scheduler]:
    plain = _build()
    # priced by the avx512_vnni table alone, as _cheap_verify_rows says why: the speculator takes its table when it is
    # built, before any test's fixture runs (the live calibration has tests of its own: tests/unit/test_spec_cost_meter.py,
    # test_spec_calibration.py)
    from sglang.srt.speculative import draft_policy

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SGLANG_SPEC_COST_CALIBRATION", "0")
        mp.setattr(draft_policy, "_host", lambda: ("avx512_vnni", "any CPU model"))
        spec = _build(speculative_algorithm="NGRAM", speculative_num_draft_tokens=8)  # last publish: both read the same bags
    assert plain.spec is None and spec.spec is not None
    assert spec.spec.meter.table.rows == draft_policy.verify_costs("avx512_vnni")
    return plain, spec


def chat(s: Scheduler, text: str) -> list[int]:
    return s.tokenizer.encode(s.tokenizer.apply_chat_template([{"role": "user", "content": text}]))


def run(s: Scheduler, prompts: list[list[int]], params: list[dict] | dict) -> list[dict]:
    plist = params if isinstance(params, list) else [params] * len(prompts)
    rids = []
    for ids, p in zip(prompts, plist):
        rid = f"s{next(_rid)}"
        rids.append(rid)
        s.add_request(TokenizedGenerateReqInput(rid, ids, {"temperature": 0, **p}))
    while s.has_work():
        s.step()
    out = {r: {"ids": [], "reason": None, "logprobs": [], "spec": None} for r in rids}
    for o in s.outbox:
        if isinstance(o, BatchTokenIDOut):
            for i, rid in enumerate(o.rids):
                if rid in out:
                    out[rid]["ids"] += o.new_token_ids[i]
                    out[rid]["logprobs"] += o.logprobs[i]
                    out[rid]["reason"] = o.finished_reasons[i] or out[rid]["reason"]
                    out[rid]["spec"] = o.spec[i]
        elif isinstance(o, SchedulerError):
            raise AssertionError(o.message)
    s.outbox.clear()
    return [out[r] for r in rids]


def _no_leak(s: Scheduler) -> None:
    s.tree.reset()
    assert s.allocator.available_pages() == s.allocator.num_pages  # rejected drafts' pages went back too


@pytest.fixture(scope="module")
def greedy(pair) -> tuple[list[dict], list[dict]]:
    plain, spec = pair
    prompts = [chat(plain, p) for p in PROMPTS]
    a = [run(plain, [p], {"max_new_tokens": 48})[0] for p in prompts]
    spec.spec.flush()
    b = [run(spec, [p], {"max_new_tokens": 48})[0] for p in prompts]
    return a, b


def test_the_default_configuration_speculates_the_plain_servers_greedy_tokens_alone_and_batched(monkeypatch):
    # the default arithmetic (the GGUF's Q4 blocks, int8 / int16 activations, bfloat16 KV) through the fused step:
    # a verify row's logits are the decode row's bits and a row's the same in any batch (team_step.h's fixed
    # attention chunks), so NGRAM emits the plain server's tokens here too, and a batch the lone requests' tokens
    monkeypatch.delenv("SGLANG_CPU_GGUF_MATH")  # the suite's float32 (tests/conftest.py): the measured plan instead

    def build(**extra) -> Scheduler:
        sa = ServerArgs(max_total_tokens=8192, log_level="warning", **extra)
        get_context().publish(sa, role="scheduler", warn=False)
        return Scheduler(sa, 0, 0, f"tcp://127.0.0.1:{free_port()}")

    with get_context().preserve_config():
        plain, spec = build(), build(speculative_algorithm="NGRAM")
        runner = plain.tp_worker.model_runner
        assert runner.fused_decode is not None and spec.spec is not None and "q4_i8" in runner.weight_format.summary()
        # the passage, and three open questions whose answers parted from the plain server's within 15-32 tokens when a
        # lone request's attention was split per thread (bench/speculative.py's open chat)
        prompts = [chat(plain, p) for p in [PROMPTS[0], "Write a short story about a dragon who learns to paint.",
                                            "Explain how rainbows form, for a ten-year-old.",
                                            "What are the pros and cons of working from home?"]]
        alone = [run(plain, [p], {"max_new_tokens": 48})[0]["ids"] for p in prompts]
        batched = [r["ids"] for r in run(plain, prompts, {"max_new_tokens": 48})]
        spec.spec.flush()
        drafted = [run(spec, [p], {"max_new_tokens": 48})[0] for p in prompts]
        spec_batched = [r["ids"] for r in run(spec, prompts, {"max_new_tokens": 48})]
    assert batched == alone
    assert [r["ids"] for r in drafted] == alone and spec_batched == alone
    assert drafted[0]["spec"]["spec_accept_length"] > 1.5  # the passage is copied: the verifies did run


def test_greedy_tokens_equal_without_speculation_and_drafts_are_accepted(pair, greedy):
    a, b = greedy
    assert [r["ids"] for r in b] == [r["ids"] for r in a]
    copy = b[0]["spec"]
    assert copy["spec_accept_length"] > 1.5 and copy["spec_num_correct_drafts"] > 10, copy  # the passage is copied
    assert copy["spec_verify_ct"] < len(b[0]["ids"]) - 10
    assert sum(copy["spec_accept_histogram"]) == copy["spec_verify_ct"] and copy["spec_accept_histogram"] == copy["spec_correct_drafts_histogram"]
    assert pair[1].spec.avg_accept_length > 1.2
    _no_leak(pair[1])


def test_batched_speculation_equals_single_plain_decoding(pair, greedy):
    a, _ = greedy
    _, spec = pair
    b = run(spec, [chat(spec, p) for p in PROMPTS], {"max_new_tokens": 48})
    assert [r["ids"] for r in b] == [r["ids"] for r in a]
    _no_leak(spec)


@pytest.mark.parametrize("n", [3, 7, 10])
def test_max_new_tokens_inside_a_draft(pair, greedy, n):
    a, _ = greedy
    _, spec = pair
    (r,) = run(spec, [chat(spec, PROMPTS[0])], {"max_new_tokens": n})
    assert r["ids"] == a[0]["ids"][:n] and r["reason"] == {"type": "length", "length": n}
    _no_leak(spec)


def test_stop_string_and_stop_token_inside_a_draft(pair, greedy):
    a, _ = greedy
    plain, spec = pair
    tok = plain.tokenizer
    word = tok.decode(a[0]["ids"][12:13]).strip()
    assert len(word) >= 3, word
    params = {"max_new_tokens": 48, "stop": [word]}
    want, got = run(plain, [chat(plain, PROMPTS[0])], params)[0], run(spec, [chat(spec, PROMPTS[0])], params)[0]
    assert got["ids"] == want["ids"] and got["reason"] == want["reason"] == {"type": "stop", "matched": word}
    stop_id = a[0]["ids"][9]
    params = {"max_new_tokens": 48, "stop_token_ids": [stop_id]}
    got = run(spec, [chat(spec, PROMPTS[0])], params)[0]
    assert got["ids"] == a[0]["ids"][: a[0]["ids"].index(stop_id) + 1] and got["reason"]["matched"] == stop_id
    _no_leak(spec)


def test_penalties_bias_and_logprobs_match(pair):
    plain, spec = pair
    p = {"max_new_tokens": 24, "frequency_penalty": 0.3, "logit_bias": {"13": 2.0}, "logprobs": True, "top_logprobs_num": 2}
    want, got = run(plain, [chat(plain, PROMPTS[1])], p)[0], run(spec, [chat(spec, PROMPTS[1])], p)[0]
    assert got["ids"] == want["ids"]
    assert len(got["logprobs"]) == len(got["ids"])
    for (lw, tw), (lg, tg) in zip(want["logprobs"], got["logprobs"]):
        assert lg == pytest.approx(lw, abs=1e-3) and [t for t, _ in tg] == [t for t, _ in tw]
    assert got["spec"]["spec_num_proposed_drafts"] > 0
    _no_leak(spec)


def test_committed_tokens_reach_the_prefix_cache(pair, greedy):
    a, _ = greedy
    _, spec = pair
    spec.tree.reset()
    ids = chat(spec, PROMPTS[0])
    run(spec, [ids], {"max_new_tokens": 30})
    follow = ids + a[0]["ids"][:30]
    pages, _ = spec.tree.match_prefix(follow)
    assert len(pages) * spec.page_size >= len(follow) - spec.page_size  # prompt and the committed output are cached
    wrong = ids + [t + 1 for t in a[0]["ids"][:30]]
    pages, _ = spec.tree.match_prefix(wrong)
    assert len(pages) * spec.page_size <= len(ids)  # and nothing else after the prompt
    _no_leak(spec)


def test_a_typo_in_the_force_greedy_switch_stops_start_up(monkeypatch):
    from sglang.utils.env import EnvValueError

    monkeypatch.setenv("SGLANG_NGRAM_FORCE_GREEDY_VERIFY", "ture")
    with pytest.raises(EnvValueError, match="SGLANG_NGRAM_FORCE_GREEDY_VERIFY='ture' must be one of"):
        _build(speculative_algorithm="NGRAM", speculative_num_draft_tokens=8)  # the pair's own bags: nothing changes for it


# -- constrained requests: masked verify rows, the same tokens -----------------------------------------------
def test_a_constrained_request_speculates_and_emits_the_same_tokens(pair):
    plain, spec = pair
    p = {"max_new_tokens": 40, "regex": "[A-Za-z ,.]{1,400}"}
    want = run(plain, [chat(plain, PROMPTS[0])], p)[0]
    spec.spec.flush()
    got = run(spec, [chat(spec, PROMPTS[0])], p)[0]
    assert got["ids"] == want["ids"] and got["reason"] == want["reason"]
    assert re.fullmatch("[A-Za-z ,.]+", plain.tokenizer.decode(got["ids"]))
    assert got["spec"]["spec_num_correct_drafts"] > 5 and got["spec"]["spec_verify_ct"] < len(got["ids"])  # it copied the passage
    _no_leak(spec)


def test_a_json_schema_request_speculates_through_forced_keys_and_completes(pair):
    plain, spec = pair
    schema = {"type": "object", "properties": {"keeper": {"type": "string"}, "carried": {"type": "string"}},
              "required": ["keeper", "carried"], "additionalProperties": False}
    p = {"max_new_tokens": 60, "json_schema": json.dumps(schema)}
    prompt = f"Answer in JSON: what did the keeper carry, copied from the passage?\n\n{PASSAGE}"
    want = run(plain, [chat(plain, prompt)], p)[0]
    got = run(spec, [chat(spec, prompt)], p)[0]
    assert got["ids"] == want["ids"] and got["reason"] == want["reason"]
    text = plain.tokenizer.decode([t for t in got["ids"] if t not in plain.eos_ids])
    if want["reason"]["type"] == "stop":  # the grammar completed: the object is whole
        assert set(json.loads(text)) == {"keeper", "carried"}
    assert got["spec"]["spec_verify_ct"] >= 1
    _no_leak(spec)


# -- sampling: the same distribution with and without speculation ------------------------------------------
SAMPLE_PROMPT = ("Continue the list in the same style.\n\nred apple, green apple, red pear, green pear, red plum, green plum, "
                 "red grape, green grape, red")


def _counts(s: Scheduler, n: int, pos: int) -> tuple[dict[int, int], list[dict]]:
    ids = chat(s, SAMPLE_PROMPT)
    counts: dict[int, int] = {}
    metas = []
    for start in range(0, n, 4):  # batches of 4: under the compute knee, so the speculative server speculates
        params = [{"temperature": 0.7, "max_new_tokens": pos + 1, "seed": 1000 + start + i, "ignore_eos": True} for i in range(4)]
        for r in run(s, [ids] * 4, params):
            counts[r["ids"][pos]] = counts.get(r["ids"][pos], 0) + 1
            metas.append(r["spec"])
    return counts, metas


def _homogeneity_p(a: dict[int, int], b: dict[int, int], min_expected: float = 5.0) -> tuple[float, int]:
    """Pearson's chi-square test that two count tables come from one distribution; rare tokens pooled."""
    na, nb = sum(a.values()), sum(b.values())
    keys = sorted(set(a) | set(b), key=lambda k: -(a.get(k, 0) + b.get(k, 0)))
    cells, rest = [], [0, 0]
    for k in keys:
        x, y = a.get(k, 0), b.get(k, 0)
        if (x + y) * min(na, nb) / (na + nb) >= min_expected:
            cells.append((x, y))
        else:
            rest[0] += x
            rest[1] += y
    if sum(rest):
        cells.append(tuple(rest))
    stat = 0.0
    for x, y in cells:
        tot = x + y
        for obs, n in ((x, na), (y, nb)):
            exp = tot * n / (na + nb)
            stat += (obs - exp) ** 2 / exp
    dof = len(cells) - 1
    # survival function of chi-square via the regularized upper incomplete gamma (series for P)
    return _chi2_sf(stat, dof), dof


def _chi2_sf(x: float, k: int) -> float:
    a, z = k / 2, x / 2
    if z <= 0:
        return 1.0
    term = total = 1.0 / a
    n = 1
    while term > total * 1e-12:
        term *= z / (a + n)
        total += term
        n += 1
    return max(0.0, 1.0 - math.exp(-z + a * math.log(z) - math.lgamma(a)) * total)


def test_sampled_tokens_after_drafted_positions_follow_the_same_distribution(pair):
    plain, spec = pair
    pos = 3  # the 4th output token: produced by a verify step whose drafts cover it (the list repeats)
    want, _ = _counts(plain, 160, pos)
    spec.spec.flush()
    got, metas = _counts(spec, 160, pos)
    # speculation ran (a batch of 4 verifies at most COMPUTE_KNEE - 4 drafts a step) and its drafts were accepted
    assert sum(m["spec_num_proposed_drafts"] for m in metas) > 80
    assert sum(m["spec_num_correct_drafts"] for m in metas) > 20
    assert len(want) > 1  # the position is not deterministic at this temperature
    p, dof = _homogeneity_p(want, got)
    assert dof >= 1 and p > 1e-3, (p, want, got)
    _no_leak(spec)


def test_hooks_see_every_verify_step(pair, greedy):
    # a hook on code the fused plan stands in for: the plan stands aside for verify steps too, and the hook runs in
    # every forward (prefill + one per verify step, every layer); a hook on the worker sees each step's batch
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType
    from sglang.testing.plugins import restored_hooks

    a, _ = greedy
    _, spec = pair
    runner = spec.tp_worker.model_runner
    layers, modes = [], []
    with restored_hooks():
        HookRegistry.register("sglang.srt.models.llama.LlamaAttention.forward", lambda *x, **k: layers.append(1), HookType.BEFORE)
        HookRegistry.register("sglang.srt.managers.tp_worker.TpModelWorker.forward_batch_generation",
                              lambda *x, **k: modes.append(next(v.mode.value for v in x if hasattr(v, "mode"))), HookType.BEFORE)
        HookRegistry.apply_hooks()
        (r,) = run(spec, [chat(spec, PROMPTS[0])], {"max_new_tokens": 16})
        assert runner.fused_decode is None
    assert r["ids"] == a[0]["ids"][:16]
    steps = r["spec"]["spec_verify_ct"]
    assert "target_verify" in modes and len(modes) == 1 + steps
    assert len(layers) == (1 + steps) * runner.model_config.num_hidden_layers
    _no_leak(spec)
