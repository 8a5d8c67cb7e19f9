"""Constrained requests waiting for their grammar: compiled off the scheduler's loop, then admitted.

The scheduler owns one :class:`GrammarQueue`. A request with a constraint parks here while a worker
thread compiles it (once per distinct constraint: a bounded cache of futures), so a slow compile never
stalls other requests; the backend itself is created on that thread too, in the background from
start-up (:meth:`GrammarQueue.warm_up`), so neither start-up nor the first constrained request waits
for its import. Once compiled, the request gets its own matcher and
joins the waiting queue; when its constraint does not compile, it fails alone with the compiler's
message (400).
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections import OrderedDict
from typing import Any

from sglang.srt.constrained.base_grammar_backend import (
    NO_BACKEND,
    BaseGrammarBackend,
    Constraint,
    GrammarError,
    check_grammar_backend,
    create_grammar_backend,
)
from sglang.srt.managers.schedule_batch import Req

POLL_S = 0.005  # how long an otherwise idle loop waits on a compile before it looks at its sockets again
CACHE_SIZE = 256  # distinct constraints kept compiled (least recently used dropped first)


class GrammarQueue:
    def __init__(self, backend_name: str, tokenizer: Any, vocab_size: int) -> None:
        check_grammar_backend(backend_name)  # a wrong --grammar-backend fails start-up, naming the supported ones
        self.backend_name = backend_name
        self._tokenizer, self._vocab_size = tokenizer, vocab_size
        self.backend: BaseGrammarBackend | None = None
        self._backend_lock = threading.Lock()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._cache: OrderedDict[Constraint, concurrent.futures.Future[Any]] = OrderedDict()
        self.parked: list[tuple[Req, concurrent.futures.Future[Any]]] = []

    def _ensure_backend(self) -> BaseGrammarBackend | None:  # on the worker thread
        with self._backend_lock:
            if self.backend is None:
                self.backend = create_grammar_backend(self.backend_name, self._tokenizer, self._vocab_size)
        return self.backend

    def _compile(self, key: Constraint) -> Any:  # on the worker thread
        backend = self._ensure_backend()
        assert backend is not None
        return backend.compile(key)

    def _submit(self, fn: Any, *args: Any) -> concurrent.futures.Future[Any]:
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="grammar-compile")
        return self._pool.submit(fn, *args)

    def warm_up(self) -> None:
        """Create the backend now, before the scheduler reports ready (as upstream's scheduler does at start-up); a failure
        shows at the first constrained request. Not in the background: its import and token table hold the GIL for about
        a second, and a scheduler that waits for the GIL after every step ran its first ~60 decode steps 5x slower."""
        if self.backend_name != NO_BACKEND:
            concurrent.futures.wait([self._submit(self._ensure_backend)])

    def _future(self, key: Constraint) -> concurrent.futures.Future[Any]:
        fut = self._cache.get(key)
        if fut is not None:
            self._cache.move_to_end(key)
            return fut
        fut = self._cache[key] = self._submit(self._compile, key)
        while len(self._cache) > CACHE_SIZE:
            self._cache.popitem(last=False)
        return fut

    def park(self, req: Req) -> bool:
        """True when ``req`` is constrained and now waits for its grammar; raises :class:`GrammarError`
        when this engine serves no constraints."""
        key = req.params.constraint
        if key is None:
            return False
        if self.backend_name == NO_BACKEND:
            raise GrammarError(f"constrained decoding ({key[0]}) is off on this server (--grammar-backend {NO_BACKEND}); "
                               "start it with --grammar-backend xgrammar")
        self.parked.append((req, self._future(key)))
        return True

    def take_ready(self) -> tuple[list[Req], list[tuple[Req, str, int]]]:
        """Requests whose grammar compiled (each with a fresh matcher), and ``(request, why, HTTP status)`` for those
        that failed: 400 for a constraint that does not compile, 500 for a backend that cannot start or breaks."""
        ready: list[Req] = []
        failed: list[tuple[Req, str, int]] = []
        still: list[tuple[Req, concurrent.futures.Future[Any]]] = []
        for req, fut in self.parked:
            if not fut.done():
                still.append((req, fut))
                continue
            try:
                compiled = fut.result()
                assert self.backend is not None
                req.sampler.grammar = self.backend.new_matcher(compiled)
                req.sampler.grammar_backend = self.backend
            except GrammarError as exc:
                failed.append((req, str(exc), 400))
                continue
            except Exception as exc:  # a backend that fails to start or breaks fails this request, not the loop
                failed.append((req, f"the {self.backend_name} grammar backend failed: {type(exc).__name__}: {exc}", 500))
                continue
            ready.append(req)
        self.parked = still
        return ready, failed

    def remove(self, rid: str) -> Req | None:
        for i, (req, _) in enumerate(self.parked):
            if req.rid == rid:
                del self.parked[i]
                return req
        return None

    def holds(self) -> list[Req]:
        return [req for req, _ in self.parked]

    def wait(self) -> None:
        """Block briefly for a compile to finish (the loop calls this only when it has nothing else to run)."""
        if self.parked:
            concurrent.futures.wait([f for _, f in self.parked], timeout=POLL_S, return_when=concurrent.futures.FIRST_COMPLETED)
