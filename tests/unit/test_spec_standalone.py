"""STANDALONE speculative decoding without a model: its flags' resolution and refusals, and speculative
sampling with a draft model's probabilities (lossless, and accepting ``sum(min(p, q))`` of the drafts, more
than target-only acceptance of the same drafts would)."""

from __future__ import annotations

import pytest
import torch

from sglang.srt.arg_groups.errors import ServerArgsError
from sglang.srt.layers.sampler import RequestSampler
from sglang.srt.sampling.sampling_params import SamplingParams
from sglang.srt.server_args import ServerArgs
from sglang.srt.speculative.verify import accept_chain, verify

V = 6
Q = torch.tensor([0.05, 0.4, 0.1, 0.25, 0.15, 0.05])  # the target's distribution
P = torch.tensor([0.3, 0.1, 0.05, 0.35, 0.1, 0.1])  # the draft's: different, so the residual path matters
CHI2_5DOF_999 = 20.52  # chi-square 99.9% quantile, 5 degrees of freedom (seeds fixed: deterministic)


def _spec(**kw) -> ServerArgs:
    return ServerArgs(speculative_algorithm="STANDALONE", speculative_draft_model_path="/models/draft.gguf", **kw)


def test_defaults_are_a_chain_of_three_drafts_and_steps_set_the_verify_width():
    sa = _spec()
    sa.check_server_args()
    assert (sa.speculative_num_steps, sa.speculative_eagle_topk, sa.speculative_num_draft_tokens) == (3, 1, 4)
    assert sa.max_running_requests == 48  # upstream's cap for any speculative server
    sa = _spec(speculative_num_steps=5, speculative_num_draft_tokens=9)
    assert (sa.speculative_eagle_topk, sa.speculative_num_draft_tokens) == (1, 6)  # a chain verifies steps + 1, as upstream forces


@pytest.mark.parametrize(("kw", "message"), [
    ({"speculative_draft_model_path": None}, "STANDALONE needs --speculative-draft-model-path"),
    ({"speculative_num_steps": 3, "speculative_eagle_topk": 4, "speculative_num_draft_tokens": 8}, "--speculative-eagle-topk 4: .*topk 1"),
    ({"speculative_num_draft_tokens": 8}, "need --speculative-num-steps too"),
    ({"speculative_num_steps": 0}, "--speculative-num-steps must be >= 1"),
    ({"tp_size": 2}, "drop --tp-size 2"),
])
def test_what_standalone_cannot_run_is_refused_naming_the_flag(kw, message):
    fields = {"speculative_draft_model_path": "/models/draft.gguf", **kw}
    with pytest.raises(ServerArgsError, match=message):
        ServerArgs(speculative_algorithm="STANDALONE", **fields).check_server_args()


def test_eagle_is_still_refused_and_points_at_standalone():
    with pytest.raises(ServerArgsError, match="EAGLE needs .*STANDALONE"):
        ServerArgs(speculative_algorithm="EAGLE").check_server_args()


def _sampler(seed: int) -> RequestSampler:
    return RequestSampler(SamplingParams.from_dict({"max_new_tokens": 16, "temperature": 1.0}, V), seed, 0)


def _first_tokens(draft_probs: bool, n: int) -> tuple[list[int], int]:
    rows = torch.log(torch.stack([Q, Q]))
    s = _sampler(11)
    pick = torch.Generator().manual_seed(5)
    first, accepted = [0] * V, 0
    for _ in range(n):
        d = int(torch.multinomial(P, 1, generator=pick))  # the draft model samples its token from P
        toks, _ = accept_chain(rows, [d], s, draft_probs=[P] if draft_probs else None)
        first[toks[0]] += 1
        accepted += len(toks) == 2
    return first, accepted


def test_speculative_sampling_with_the_draft_probabilities_is_lossless_and_accepts_min_p_q():
    n = 8000
    first, accepted = _first_tokens(True, n)
    exp = [n * float(q) for q in Q]
    assert sum((c - e) ** 2 / e for c, e in zip(first, exp)) < CHI2_5DOF_999, first
    want = float(torch.minimum(P, Q).sum())  # 0.6: accepted mass of speculative sampling
    assert abs(accepted / n - want) < 0.03, accepted / n
    _, target_only = _first_tokens(False, n)  # target-only acceptance: sum(P * Q) = 0.18
    assert target_only / n < want - 0.2


def test_verify_hands_each_request_its_own_draft_rows():
    # request 0 samples with a draft row that makes its draft certain to be accepted; request 1 is greedy (no rows)
    q = torch.tensor([0.0, 1.0, 0.0, 0.0, 0.0, 0.0])
    logits = torch.log(torch.stack([q, Q, Q, Q]).clamp_min(1e-30))
    greedy = RequestSampler(SamplingParams.from_dict({"max_new_tokens": 16, "temperature": 0}, V), 0, 0)
    toks, _ = verify(logits, [[1], [1]], [_sampler(3), greedy], draft_probs=[[q], None])
    assert toks[0][0] == 1 and len(toks[0]) == 2
    assert toks[1] == [1, 1]  # the argmax of Q is 1: accepted, then the bonus


def test_the_draft_load_format_must_match_what_its_path_holds():
    from sglang.srt.model_loader import ModelLoadError, read_weights
    from sglang.srt.server_args import DEFAULT_MODEL

    with pytest.raises(ModelLoadError, match="holds gguf weights: use gguf or auto"):
        read_weights(DEFAULT_MODEL, load_format="safetensors")  # refused before any tensor is read
    with pytest.raises(ModelLoadError, match="not one this loader reads"):
        read_weights(DEFAULT_MODEL, load_format="pt")
