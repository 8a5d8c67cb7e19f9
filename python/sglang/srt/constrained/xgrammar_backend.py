"""The ``xgrammar`` grammar backend (upstream SGLang's default): token bitmasks over a byte-level vocabulary.

xgrammar is imported here only, when a server starts with ``--grammar-backend xgrammar`` (the default):
``import sglang`` stays light. Its token table is built once per scheduler from the engine's tokenizer.
"""

from __future__ import annotations

import re
from typing import Any

import torch

from sglang.srt.constrained.base_grammar_backend import BaseGrammarBackend, BaseGrammarObject, GrammarError

# JSON output without free whitespace between tokens: a small model left free to emit whitespace
# can loop on it until max_new_tokens; the output is the same JSON, compact.
ANY_WHITESPACE = False
ANY_JSON = "$$ANY$$"  # upstream's key for "any JSON value" (the builtin JSON grammar)
_CPP_PREFIX = re.compile(r"^\s*\[[0-9:]+\]\s+\S+:\d+:\s*")  # "[12:00:00] /project/cpp/x.cc:94: " before the message


def _clean(exc: BaseException) -> str:
    return _CPP_PREFIX.sub("", str(exc)).strip() or type(exc).__name__


class XGrammarGrammar(BaseGrammarObject):
    """A ``GrammarMatcher`` for one request."""

    def __init__(self, matcher: Any) -> None:
        self.matcher = matcher

    def accept_token(self, token: int) -> bool:
        return bool(self.matcher.accept_token(token))

    def fill_vocab_mask(self, mask: torch.Tensor, row: int) -> None:
        self.matcher.fill_next_token_bitmask(mask, row)

    def is_terminated(self) -> bool:
        return bool(self.matcher.is_terminated())

    def try_jump_forward(self) -> list[int] | None:
        return list(self.matcher.find_jump_forward_tokens()) or None  # the matcher is unchanged until they are accepted

    def rollback(self, k: int) -> None:
        if k:
            self.matcher.rollback(k)  # GrammarMatcher keeps every step's state (max_rollback_tokens -1: no limit)


class XGrammarBackend(BaseGrammarBackend):
    def __init__(self, tokenizer: Any, vocab_size: int) -> None:
        super().__init__(tokenizer, vocab_size)
        try:
            import xgrammar
            from transformers import PreTrainedTokenizerFast
        except ImportError as exc:
            raise ImportError(f"the xgrammar grammar backend needs {exc.name} (make install; or pip install --no-deps xgrammar "
                              "apache-tvm-ffi transformers); or start the server with --grammar-backend none") from None

        self.xgr = xgrammar
        hf = PreTrainedTokenizerFast(tokenizer_object=tokenizer.backend)
        info = xgrammar.TokenizerInfo.from_huggingface(hf, vocab_size=vocab_size, stop_token_ids=sorted(tokenizer.eos_token_ids))
        self.compiler = xgrammar.GrammarCompiler(info, max_threads=1)

    def _run(self, what: str, compile_fn: Any, text: str) -> Any:
        try:
            return compile_fn(text)
        except (RuntimeError, ValueError, TypeError) as exc:  # xgrammar reports every parse error as RuntimeError
            raise GrammarError(f"the {what} does not compile: {_clean(exc)}") from None

    def dispatch_json(self, schema: str) -> Any:
        if schema == ANY_JSON:
            return self.compiler.compile_builtin_json_grammar()
        return self._run("JSON schema", lambda s: self.compiler.compile_json_schema(s, any_whitespace=ANY_WHITESPACE), schema)

    def dispatch_regex(self, pattern: str) -> Any:
        return self._run("regex", self.compiler.compile_regex, pattern)

    def dispatch_ebnf(self, grammar: str) -> Any:
        return self._run("EBNF grammar", self.compiler.compile_grammar, grammar)

    def new_matcher(self, compiled: Any) -> XGrammarGrammar:
        return XGrammarGrammar(self.xgr.GrammarMatcher(compiled))

    def allocate_vocab_mask(self, rows: int) -> torch.Tensor:
        return self.xgr.allocate_token_bitmask(rows, self.vocab_size)  # int32 [rows, ceil(V / 32)], one bit per token

    def apply_vocab_mask(self, logits: torch.Tensor, mask: torch.Tensor, rows: list[int]) -> None:
        self.xgr.apply_token_bitmask_inplace(logits, mask, vocab_size=self.vocab_size, indices=rows)
