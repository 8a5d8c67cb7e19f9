"""STANDALONE speculative decoding in-process on the default model as its own draft, in the reference-exact mode
(float32, no quantization): greedy tokens equal a scheduler without speculation (alone, batched, finishing
inside a draft), a draft identical to the target has nearly all its drafts accepted (so the draft's KV is
right after every accept, and in prefixes the radix cache hands out), every KV page comes back, and a draft
model that fails costs speculation, not the request."""

from __future__ import annotations

import pytest

from integration.test_speculative import PROMPTS, _build, _no_leak, chat, run
from sglang.srt.server_args import DEFAULT_MODEL

pytestmark = pytest.mark.model

STEPS = 3
N = 20  # greedy tokens of the reference answer


@pytest.fixture(scope="module")
def pair():
    plain = _build()
    spec = _build(speculative_algorithm="STANDALONE", speculative_draft_model_path=DEFAULT_MODEL, speculative_num_steps=STEPS)
    assert plain.spec is None and spec.spec.algorithm == "STANDALONE"
    draft = spec.spec.draft.runner
    assert draft.kv_pool is not spec.tp_worker.model_runner.kv_pool and draft.allocator is spec.allocator  # own pool, one slot space
    assert draft.context_length == spec.context_length
    return plain, spec


@pytest.fixture(scope="module")
def greedy(pair):
    plain, spec = pair
    prompts = [chat(plain, PROMPTS[0])]
    a = [run(plain, [p], {"max_new_tokens": N})[0] for p in prompts]
    spec.spec.flush()
    spec.tree.reset()
    b = [run(spec, [p], {"max_new_tokens": N})[0] for p in prompts]
    return prompts, a, b


def test_greedy_tokens_equal_and_a_draft_equal_to_the_target_is_accepted(pair, greedy):
    _, a, b = greedy
    assert [r["ids"] for r in b] == [r["ids"] for r in a]
    for r in b:
        m = r["spec"]
        assert m["spec_accept_length"] > 3.0, m  # num_steps + 1 = 4 when every draft is accepted
        assert sum(m["spec_accept_histogram"]) == m["spec_verify_ct"] and m["spec_accept_rate"] > 0.9, m
        assert m["spec_num_proposed_drafts"] <= STEPS * m["spec_verify_ct"]
    assert pair[1].spec.avg_accept_length > 3.0
    _no_leak(pair[1])


def test_batched_cached_and_finishing_inside_a_draft(pair, greedy):
    prompts, a, _ = greedy
    plain, spec = pair
    b = run(spec, prompts * 2, {"max_new_tokens": N})
    assert [r["ids"] for r in b] == [a[0]["ids"]] * 2
    assert all(r["spec"]["spec_accept_length"] > 1.5 for r in b)  # two requests: the knee budget still leaves drafts
    follow = prompts[0] + a[0]["ids"]
    pages, _ = spec.tree.match_prefix(follow)
    assert len(pages) * spec.page_size >= len(follow) - 2 * spec.page_size  # the prompt and the committed output are cached
    # a follow-up turn starts from that cache: its drafts come from right draft KV (otherwise they would be rejected)
    (r,) = run(spec, [follow], {"max_new_tokens": 8})
    (want,) = run(plain, [follow], {"max_new_tokens": 8})
    assert r["ids"] == want["ids"] and r["spec"]["spec_accept_length"] > 2.5, r["spec"]
    for n in (2, 6):  # the first verify emits tokens 2..5: both end inside a draft
        (r,) = run(spec, [prompts[0]], {"max_new_tokens": n})
        assert r["ids"] == a[0]["ids"][:n] and r["reason"] == {"type": "length", "length": n}
    word = spec.tokenizer.decode(a[0]["ids"][8:9]).strip()
    (r,) = run(spec, [prompts[0]], {"max_new_tokens": N, "stop": [word]})
    assert r["reason"] == {"type": "stop", "matched": word} and len(r["ids"]) <= 9
    _no_leak(spec)


def test_penalties_logprobs_and_sampling(pair, greedy):
    plain, spec = pair
    p = {"max_new_tokens": 8, "frequency_penalty": 0.3, "logit_bias": {"13": 2.0}, "logprobs": True, "top_logprobs_num": 2}
    prompt = greedy[0][0]
    want, got = run(plain, [prompt], p)[0], run(spec, [prompt], p)[0]
    assert got["ids"] == want["ids"] and len(got["logprobs"]) == len(got["ids"])
    for (lw, tw), (lg, tg) in zip(want["logprobs"], got["logprobs"]):
        assert lg == pytest.approx(lw, abs=1e-3) and [t for t, _ in tg] == [t for t, _ in tw]
    # sampling: drafts drawn from the draft's distribution, which equals the target's, are nearly always accepted
    params = [{"temperature": 0.7, "max_new_tokens": 10, "seed": 7 + i, "ignore_eos": True} for i in range(2)]
    outs = run(spec, [prompt] * 2, params)
    assert all(len(o["ids"]) == 10 and o["spec"]["spec_accept_length"] > 2.0 for o in outs), [o["spec"] for o in outs]
    _no_leak(spec)


def test_a_failing_draft_model_costs_speculation_not_the_request(pair, greedy):
    from sglang.srt.managers.io_struct import TokenizedGenerateReqInput
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType
    from sglang.testing.plugins import restored_hooks

    prompts, a, _ = greedy
    _, spec = pair
    spec.tree.reset()  # no cached draft KV to start from

    def broken(*args, **kwargs):
        raise RuntimeError("the draft model is broken")

    spec.add_request(TokenizedGenerateReqInput("broken-draft", prompts[0], {"temperature": 0, "max_new_tokens": N}))
    with restored_hooks():
        HookRegistry.register("sglang.srt.speculative.draft_worker.DraftWorker.forward", broken, HookType.BEFORE)
        HookRegistry.apply_hooks()
        for _ in range(6):  # the prefill (the draft's fails too) and five steps without drafts
            spec.step()
    req = spec.live["broken-draft"]
    assert len(req.output_ids) == 6 and req.spec.proposed == 0 and req.spec.draft_len == 0
    # the draft works again: its KV catches up over the prompt and the 6 tokens, and its drafts are accepted
    while spec.has_work():
        spec.step()
    assert req.output_ids == a[0]["ids"] and req.spec.accepted >= 3
    spec.outbox.clear()
    _no_leak(spec)
