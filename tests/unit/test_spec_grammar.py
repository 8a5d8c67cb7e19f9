"""Constrained requests under speculative decoding, without a model: each verified row is masked with what
the grammar allows after the drafts before it, drafts are cut to the prefix the grammar accepts, the
matcher ends where it began, and a grammar backend without ``rollback`` keeps its requests out of
speculation. The grammar here is a real ``BaseGrammarObject`` over a 6-token vocabulary (a fixed sequence
of allowed sets), on the base class's default mask layout."""

from __future__ import annotations

import pytest
import torch

from sglang.srt.constrained import BaseGrammarBackend, BaseGrammarObject, can_rollback
from sglang.srt.layers.sampler import RequestSampler
from sglang.srt.sampling.sampling_params import SamplingParams
from sglang.srt.speculative.spec_worker import ineligible
from sglang.srt.speculative.verify import accept_chain, constrain_rows, grammar_prefix

V = 6
EOS = 5


class Steps(BaseGrammarObject):
    """Position ``i`` allows the tokens ``sets[i]``; the grammar completes when EOS is accepted."""

    def __init__(self, sets: list[set[int]]) -> None:
        self.sets, self.taken = sets, []

    def _allowed(self) -> set[int]:
        return self.sets[len(self.taken)] if len(self.taken) < len(self.sets) else {EOS}

    def accept_token(self, token: int) -> bool:
        if self.is_terminated() or token not in self._allowed():
            return False
        self.taken.append(token)
        return True

    def fill_vocab_mask(self, mask: torch.Tensor, row: int) -> None:
        mask[row] = False
        for t in self._allowed():
            mask[row, t] = True

    def is_terminated(self) -> bool:
        return bool(self.taken) and self.taken[-1] == EOS

    def rollback(self, k: int) -> None:
        del self.taken[len(self.taken) - k :]


class NoRollback(Steps):
    rollback = BaseGrammarObject.rollback  # a backend that cannot undo: the base class's default


class StepsBackend(BaseGrammarBackend):
    def dispatch_json(self, schema: str) -> None: ...
    def dispatch_regex(self, pattern: str) -> None: ...
    def dispatch_ebnf(self, grammar: str) -> None: ...

    def new_matcher(self, compiled: list[set[int]]) -> Steps:
        return Steps(compiled)


def constrained(sets: list[set[int]], **params) -> RequestSampler:
    s = RequestSampler(SamplingParams.from_dict({"max_new_tokens": 16, **params}, V), 0, 0)
    s.grammar_backend = StepsBackend(None, V)
    s.grammar = s.grammar_backend.new_matcher(sets)
    return s


def peaked(*argmax: int) -> torch.Tensor:
    rows = torch.zeros(len(argmax), V)
    for j, t in enumerate(argmax):
        rows[j, t] = 10.0
    return rows


def test_each_row_is_masked_after_the_drafts_before_it_and_the_matcher_rolls_back():
    s = constrained([{1, 2}, {3}, {4}])
    s.grammar.accept_token(1)  # one token already committed: rows start at position 1
    rows = torch.zeros(3, V)
    constrain_rows(rows, [3, 4], s)
    assert torch.isfinite(rows[0]).tolist() == [False, False, False, True, False, False]  # position 1: {3}
    assert torch.isfinite(rows[1]).tolist() == [False, False, False, False, True, False]  # after draft 3: {4}
    assert torch.isfinite(rows[2]).tolist() == [False] * 5 + [True]  # after 3, 4: only EOS
    assert s.grammar.taken == [1]


def test_greedy_rejects_a_draft_the_grammar_refuses_and_emits_the_masked_argmax():
    s = constrained([{1, 2}, {3, 4}, {0}])
    # the target prefers 2 then 0 (which position 1 refuses); the drafts are 2, 0
    toks, _ = accept_chain(peaked(2, 0, 0), [2, 0], s)
    assert toks[0] == 2 and toks[1] in (3, 4)  # not the raw argmax 0: the row is masked
    assert s.grammar.taken == []
    # a refused draft stops the walk even when the raw argmax agrees with it
    toks, _ = accept_chain(peaked(0, 0), [0], constrained([{1, 2}]))
    assert toks[0] in (1, 2)


def test_a_draft_the_grammar_excludes_is_never_accepted_when_sampling():
    for seed in range(200):
        s = constrained([{1, 2}, {3}], temperature=1.0, seed=seed)
        # the target puts its mass on 0 (refused); the draft is 0
        toks, _ = accept_chain(peaked(0, 0), [0], s)
        assert toks[0] in (1, 2), (seed, toks)


def test_drafts_are_cut_to_the_prefix_the_grammar_accepts_and_end_at_completion():
    s = constrained([{1}, {2}, {3}])
    assert grammar_prefix([1, 2, 0, 3], s) == 2 and s.grammar.taken == []
    s = constrained([{1}, {EOS}, {3}])
    assert grammar_prefix([1, EOS, 3], s) == 2  # EOS completes the grammar: nothing after it is verified
    assert grammar_prefix([4], s) == 0


def test_logprobs_of_emitted_tokens_come_from_the_masked_rows():
    s = constrained([{1, 2}, {3}], logprobs=True)
    rows = torch.zeros(2, V)
    toks, infos = accept_chain(rows, [1], s)
    assert toks == [1, 3]
    assert infos[0][0] == pytest.approx(-0.6931, abs=1e-3)  # two allowed tokens at position 0
    assert infos[1][0] == pytest.approx(0.0, abs=1e-6)  # one allowed token at position 1


class _Req:
    def __init__(self, grammar: BaseGrammarObject | None) -> None:
        self.sampler = RequestSampler(SamplingParams.from_dict({"max_new_tokens": 4}, V), 0, 0)
        self.sampler.grammar = grammar


def test_a_backend_without_rollback_keeps_its_requests_out_of_speculation():
    assert can_rollback(Steps([{1}])) and not can_rollback(NoRollback([{1}]))
    assert ineligible(_Req(Steps([{1}]))) is None and ineligible(_Req(None)) is None
    why = ineligible(_Req(NoRollback([{1}])))
    assert why is not None and "NoRollback" in why and "roll back" in why
    with pytest.raises(NotImplementedError, match="NoRollback"):
        NoRollback([{1}]).rollback(1)
