"""Grammar backends, the grammar queue and the sampler's masks, on a byte-level toy vocabulary (no model)."""

from __future__ import annotations

import re

import pytest
import torch

from sglang.srt.constrained import (
    GRAMMAR_BACKENDS,
    BaseGrammarBackend,
    BaseGrammarObject,
    GrammarError,
    create_grammar_backend,
    register_grammar_backend,
)
from sglang.srt.layers.sampler import RequestSampler, sample
from sglang.srt.managers.grammar_queue import GrammarQueue
from sglang.srt.managers.schedule_batch import Req
from sglang.srt.sampling.sampling_params import SamplingParams, SamplingParamsError
from sglang.srt.tokenizer.tokenizer import Tokenizer

EOS = 256


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    """One token per byte (the GPT-2 byte alphabet) and an end-of-sequence token."""
    from tokenizers import AddedToken, decoders, models, pre_tokenizers
    from tokenizers import Tokenizer as HFTokenizer

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    backend = HFTokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens([AddedToken("<eos>", special=True)])
    assert backend.token_to_id("<eos>") == EOS
    return Tokenizer(backend, {EOS}, None, False, None)


@pytest.fixture(scope="module")
def xgr(tok):
    return create_grammar_backend("xgrammar", tok, EOS + 1)


def _req(rid: str, **params) -> Req:
    sp = SamplingParams.from_dict(params)
    return Req(rid, [1, 2], sp, RequestSampler(sp, 0, 1), False)


def _decode(backend: BaseGrammarBackend, compiled, tok: Tokenizer, steps: int = 64, temperature: float = 0.0, seed: int = 0) -> str:
    """Sample under the grammar from random logits until it terminates: whatever the logits say, the mask decides."""
    sp = SamplingParams.from_dict({"temperature": temperature, "seed": seed})
    s = RequestSampler(sp, 0, 0)
    s.grammar, s.grammar_backend = backend.new_matcher(compiled), backend
    gen = torch.Generator().manual_seed(seed)
    out: list[int] = []
    for _ in range(steps):
        (t,), _ = sample(torch.randn(1, EOS + 1, generator=gen), [s])
        assert s.grammar.accept_token(t)
        if s.grammar.is_terminated():
            assert t == EOS
            return tok.decode(out)
        out.append(t)
    raise AssertionError(f"no end after {steps} tokens: {tok.decode(out)!r}")


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_the_mask_forces_a_regex_whatever_the_logits(tok, xgr, temperature):
    pattern = r"(19|20)[0-9]{2}-(0[1-9]|1[0-2])-[0-3][0-9]"
    compiled = xgr.compile(("regex", pattern))
    for seed in range(5):
        assert re.fullmatch(pattern, _decode(xgr, compiled, tok, temperature=temperature, seed=seed))


def test_a_json_schema_is_forced_and_parses(tok, xgr):
    import json

    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"enum": [1, 2, 3]}}, "required": ["ok", "n"],
              "additionalProperties": False}
    compiled = xgr.compile(("json", json.dumps(schema)))
    for seed in range(3):
        data = json.loads(_decode(xgr, compiled, tok, steps=80, temperature=1.0, seed=seed))
        assert set(data) == {"ok", "n"} and isinstance(data["ok"], bool) and data["n"] in (1, 2, 3)


@pytest.mark.parametrize(("key", "fragment"), [
    (("regex", "(ab"), "the regex does not compile: Regex parsing error"),
    (("json", '{"type": 5}'), "the JSON schema does not compile"),
    (("ebnf", "root ::= "), "the EBNF grammar does not compile"),
    (("xml", "<a/>"), "unknown constraint kind 'xml'"),
])
def test_a_constraint_that_does_not_compile_names_the_compiler_message_without_its_source_path(xgr, key, fragment):
    with pytest.raises(GrammarError) as info:
        xgr.compile(key)
    assert fragment in str(info.value) and ".cc:" not in str(info.value)


def test_the_queue_compiles_each_constraint_once_and_admits_or_fails_each_request(tok):
    q = GrammarQueue("xgrammar", tok, EOS + 1)
    assert q.backend is None  # nothing imported before the first constrained request
    a, b, bad, free = _req("a", regex="[0-9]+"), _req("b", regex="[0-9]+"), _req("c", regex="[0-"), _req("d")
    assert not q.park(free)
    assert q.park(a) and q.park(b) and q.park(bad)
    assert q.parked[0][1] is q.parked[1][1]  # one compile for the two identical constraints
    ready, failed = [], []
    for _ in range(2000):
        got, lost = q.take_ready()
        ready += got
        failed += lost
        if not q.parked:
            break
        q.wait()
    assert [r.rid for r in ready] == ["a", "b"] and a.sampler.grammar is not b.sampler.grammar  # one matcher per request
    assert [(r.rid, status) for r, _, status in failed] == [("c", 400)] and "does not compile" in failed[0][1]


def test_the_queue_forgets_an_aborted_request(tok):
    q = GrammarQueue("xgrammar", tok, EOS + 1)
    r = _req("x", ebnf='root ::= "yes" | "no"')
    q.park(r)
    assert q.remove("x") is r and q.holds() == [] and q.remove("x") is None


def test_without_a_backend_a_constrained_request_is_refused_naming_the_flag(tok):
    q = GrammarQueue("none", tok, EOS + 1)
    assert not q.park(_req("free"))
    with pytest.raises(GrammarError, match="--grammar-backend none"):
        q.park(_req("c", json_schema='{"type": "object"}'))


def test_an_unknown_backend_fails_at_start_up_listing_the_supported_ones(tok):
    with pytest.raises(ValueError, match=r"unknown grammar backend 'nope'; supported: \['none', 'xgrammar'\] \(--grammar-backend\)"):
        GrammarQueue("nope", tok, EOS + 1)


class EvenTokens(BaseGrammarObject):
    """A plugin's toy grammar: even token ids only, then end after ``n`` tokens."""

    def __init__(self, n: int) -> None:
        self.left = n

    def accept_token(self, token: int) -> bool:
        if token % 2:
            return False
        self.left -= 1
        return True

    def fill_vocab_mask(self, mask: torch.Tensor, row: int) -> None:
        mask[row, 0::2] = True

    def is_terminated(self) -> bool:
        return self.left <= 0


class EvenBackend(BaseGrammarBackend):
    def dispatch_json(self, schema: str) -> int:
        raise GrammarError("EvenBackend serves regexes only")

    def dispatch_regex(self, pattern: str) -> int:
        return len(pattern)

    def dispatch_ebnf(self, grammar: str) -> int:
        raise GrammarError("EvenBackend serves regexes only")

    def new_matcher(self, compiled: int) -> EvenTokens:
        return EvenTokens(compiled)


def test_a_plugin_backend_registers_and_its_masks_use_the_default_layout(monkeypatch):
    monkeypatch.setitem(GRAMMAR_BACKENDS, "even", f"{__name__}:EvenBackend")
    backend = create_grammar_backend("even", None, 11)
    assert isinstance(backend, EvenBackend)
    constrained, free = RequestSampler(SamplingParams(temperature=1.0, seed=3), 0, 0), RequestSampler(SamplingParams(temperature=0), 0, 0)
    constrained.grammar, constrained.grammar_backend = backend.new_matcher(backend.compile(("regex", "abc"))), backend
    logits = torch.zeros(2, 11)
    logits[:, 1] = 50.0  # an odd token the free row takes and the constrained row may never
    for _ in range(5):
        (c, f), _ = sample(logits.clone(), [constrained, free])
        assert c % 2 == 0 and f == 1


def test_register_refuses_none_and_a_second_class_under_one_name():
    with pytest.raises(ValueError, match="reserved"):
        register_grammar_backend("none", "x:Y")
    with pytest.raises(ValueError, match="already registered"):
        register_grammar_backend("xgrammar", "elsewhere:Backend")
    with pytest.raises(TypeError, match="must be a subclass"):
        GRAMMAR_BACKENDS["bogus-test"] = "sglang.srt.sampling.sampling_params:SamplingParams"
        try:
            create_grammar_backend("bogus-test", None, 8)
        finally:
            del GRAMMAR_BACKENDS["bogus-test"]


@pytest.mark.parametrize(("params", "fragment"), [
    ({"regex": "a", "ebnf": "root ::= \"a\""}, "at most one constraint"),
    ({"json_schema": "{nope"}, "json_schema is not valid JSON"),
    ({"json_schema": "[1]"}, "must be a JSON object"),
    ({"regex": ""}, "non-empty string"),
    ({"ebnf": 5}, "non-empty string"),
])
def test_sampling_params_take_one_well_formed_constraint(params, fragment):
    with pytest.raises(SamplingParamsError, match=re.escape(fragment)):
        SamplingParams.from_dict(params)


def test_the_constraint_key_is_upstreams():
    assert SamplingParams.from_dict({"json_schema": "$$ANY$$"}).constraint == ("json", "$$ANY$$")
    assert SamplingParams.from_dict({"regex": "[0-9]"}).constraint == ("regex", "[0-9]")
    assert SamplingParams.from_dict({}).constraint is None
