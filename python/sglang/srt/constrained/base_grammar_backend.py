"""The grammar-backend axis: what a constrained request needs from a backend, and a lazily importing registry.

A request carries at most one constraint, ``(kind, text)`` with kind ``"json"`` (a JSON schema),
``"regex"`` or ``"ebnf"`` (upstream SGLang's keys). The scheduler's grammar queue
(``sglang.srt.managers.grammar_queue``) creates the backend and compiles each distinct constraint
once, on a worker thread, so a slow compile (or the backend's first import) never stalls the
scheduler loop; each request then holds its own matcher (:class:`BaseGrammarObject`). Out-of-tree backends
register with :func:`register_grammar_backend` (from a plugin, before the engine starts) and are
selected with ``--grammar-backend NAME``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import torch

from sglang.plugin_core.discovery import import_qualname

Constraint = tuple[str, str]  # (kind, text): ("json" | "regex" | "ebnf", the schema / pattern / grammar)
CONSTRAINT_KINDS = ("json", "regex", "ebnf")

GRAMMAR_BACKENDS: dict[str, str] = {
    "xgrammar": "sglang.srt.constrained.xgrammar_backend:XGrammarBackend",
}
NO_BACKEND = "none"  # --grammar-backend none: constrained requests are rejected with 400


class GrammarError(ValueError):
    """A constraint that does not compile (the compiler's message), or a constrained request this engine cannot serve."""


class BaseGrammarObject(ABC):
    """One request's matcher: where it stands in its grammar.

    The scheduler calls :meth:`accept_token` with every token the request emits (after sampling, on
    every TP rank alike); the sampler calls :meth:`fill_vocab_mask` for the request's row of a batch.
    """

    @abstractmethod
    def accept_token(self, token: int) -> bool:
        """Advance by ``token``; False when the grammar does not allow it (the state is then unchanged)."""

    @abstractmethod
    def fill_vocab_mask(self, mask: torch.Tensor, row: int) -> None:
        """Write row ``row`` of ``mask`` (from :meth:`BaseGrammarBackend.allocate_vocab_mask`): the tokens allowed next."""

    @abstractmethod
    def is_terminated(self) -> bool:
        """The grammar is complete and accepted a stop token: the request is done (``finish_reason: "stop"``)."""

    def try_jump_forward(self) -> list[int] | None:
        """Tokens the grammar forces next, if the backend can tell (none by default), without accepting
        them: the scheduler accepts each one it appends (jump-forward; ``--disable-jump-forward`` turns it off)."""
        return None

    def rollback(self, k: int) -> None:
        """Undo the last ``k`` accepted tokens (upstream's name). Speculative decoding walks a request's drafts
        through the matcher to mask each verified row, then rolls them back before it commits what the target
        accepted. A backend that cannot keeps this default: its requests decode without speculation
        (:func:`can_rollback`)."""
        raise NotImplementedError(f"{type(self).__name__} cannot roll back accepted tokens")


def accept_committed(grammar: BaseGrammarObject, token: int, constraint: Constraint | None) -> None:
    """Advance ``grammar`` by a token the engine committed; the sampler masked it, so a refusal is a backend fault
    and fails the request (:class:`GrammarError` naming the constraint kind). Who calls: the scheduler and the
    speculative commit."""
    if not grammar.accept_token(token):
        raise GrammarError(f"token {token} breaks the request's {constraint[0] if constraint else 'grammar'} constraint")


def can_rollback(grammar: BaseGrammarObject) -> bool:
    """Whether ``grammar``'s class implements :meth:`BaseGrammarObject.rollback` (speculative decoding needs it)."""
    return type(grammar).rollback is not BaseGrammarObject.rollback


class BaseGrammarBackend(ABC):
    """Compiles constraints for one tokenizer and makes matchers; ``vocab_size`` is the logits' width.

    Who calls: the grammar queue's worker thread (the constructor, :meth:`compile`), the scheduler loop
    (:meth:`new_matcher`, once the compile is done) and the sampler (the mask methods).
    ``dispatch_*`` raise :class:`GrammarError` for a constraint that does not compile.
    """

    def __init__(self, tokenizer: Any, vocab_size: int) -> None:
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size

    # -- compiling (worker thread) -------------------------------------------------
    @abstractmethod
    def dispatch_json(self, schema: str) -> Any:
        """Compile a JSON schema (a string); ``'{"type": "object"}'``-like schemas included."""

    @abstractmethod
    def dispatch_regex(self, pattern: str) -> Any:
        """Compile a regular expression that the whole output must match."""

    @abstractmethod
    def dispatch_ebnf(self, grammar: str) -> Any:
        """Compile an EBNF grammar (the backend's dialect; xgrammar: GBNF with a ``root`` rule)."""

    def compile(self, key: Constraint) -> Any:
        """The compiled form of ``key`` (what :meth:`new_matcher` takes)."""
        kind, text = key
        if kind not in CONSTRAINT_KINDS:
            raise GrammarError(f"unknown constraint kind {kind!r}; supported: {list(CONSTRAINT_KINDS)}")
        return {"json": self.dispatch_json, "regex": self.dispatch_regex, "ebnf": self.dispatch_ebnf}[kind](text)

    # -- matching (scheduler loop, sampler) ------------------------------------------
    @abstractmethod
    def new_matcher(self, compiled: Any) -> BaseGrammarObject:
        """A fresh matcher at the start of ``compiled``."""

    def allocate_vocab_mask(self, rows: int) -> torch.Tensor:
        """A mask for a batch of ``rows`` rows (the default layout: a bool tensor ``[rows, vocab_size]``, True = allowed)."""
        return torch.zeros(rows, self.vocab_size, dtype=torch.bool)

    def apply_vocab_mask(self, logits: torch.Tensor, mask: torch.Tensor, rows: list[int]) -> None:
        """Set the disallowed entries of float ``logits`` ``[B, V]`` to ``-inf`` in the batch rows ``rows``, in place."""
        idx = torch.tensor(rows, dtype=torch.long)
        logits[idx] = logits[idx].masked_fill(~mask[idx, : logits.shape[-1]], float("-inf"))


def register_grammar_backend(name: str, qualname: str) -> None:
    """Add a backend ``module:Class`` (a :class:`BaseGrammarBackend` subclass) under ``name``; plugins call this."""
    if name == NO_BACKEND:
        raise ValueError(f"{NO_BACKEND!r} is reserved: it turns constrained decoding off")
    if name in GRAMMAR_BACKENDS and GRAMMAR_BACKENDS[name] != qualname:
        raise ValueError(f"grammar backend {name!r} is already registered as {GRAMMAR_BACKENDS[name]}")
    GRAMMAR_BACKENDS[name] = qualname


def check_grammar_backend(name: str) -> None:
    """Raise naming the supported backends when ``--grammar-backend`` names none (checked at start-up, nothing imported)."""
    if name != NO_BACKEND and name not in GRAMMAR_BACKENDS:
        raise ValueError(f"unknown grammar backend {name!r}; supported: {sorted([*GRAMMAR_BACKENDS, NO_BACKEND])} (--grammar-backend)")


def create_grammar_backend(name: str, tokenizer: Any, vocab_size: int) -> BaseGrammarBackend | None:
    """The backend ``--grammar-backend`` names, or ``None`` for ``none``."""
    check_grammar_backend(name)
    if name == NO_BACKEND:
        return None
    qualname = GRAMMAR_BACKENDS[name]
    cls = import_qualname(qualname)
    if not (isinstance(cls, type) and issubclass(cls, BaseGrammarBackend)):
        raise TypeError(f"grammar backend {name!r} ({qualname}) must be a subclass of {BaseGrammarBackend.__module__}.BaseGrammarBackend")
    return cls(tokenizer, vocab_size)
