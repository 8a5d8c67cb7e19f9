"""Constrained decoding: grammar backends (one base class, a registry plugins extend) and their matchers."""

from sglang.srt.constrained.base_grammar_backend import (
    GRAMMAR_BACKENDS,
    BaseGrammarBackend,
    BaseGrammarObject,
    GrammarError,
    can_rollback,
    check_grammar_backend,
    create_grammar_backend,
    register_grammar_backend,
)

__all__ = [
    "GRAMMAR_BACKENDS",
    "BaseGrammarBackend",
    "BaseGrammarObject",
    "GrammarError",
    "can_rollback",
    "check_grammar_backend",
    "create_grammar_backend",
    "register_grammar_backend",
]
