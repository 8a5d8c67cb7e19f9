"""Fault containment of the scheduler: per request, and for its loop.

What fails while serving one request fails that request (the scheduler does
that itself). What fails outside any request (building a batch, a hook on the
idle loop) is counted here: each failure is logged with the raising hook's
plugin, and after ``SGLANG_SCHEDULER_MAX_FAILURES`` consecutive failures
(default 20, with a growing pause between them) the scheduler stops with that
cause. ``SGLANG_PLUGINS_STRICT=1`` stops at the first exception a hook raises.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from sglang.plugin_core.hooks.faults import describe_fault, fail_fast
from sglang.srt.managers.io_struct import SchedulerError, TokenizedGenerateReqInput
from sglang.srt.managers.schedule_batch import Req, ScheduleBatch

if TYPE_CHECKING:
    from sglang.srt.managers.grammar_queue import GrammarQueue

logger = logging.getLogger("sglang.srt.managers.scheduler")

MAX_FAILURES_ENV = "SGLANG_SCHEDULER_MAX_FAILURES"


class SchedulerFatalError(RuntimeError):
    """The scheduler cannot go on; the message is the cause every client receives."""


class LoopGuard:
    """Counts consecutive loop failures; raises :class:`SchedulerFatalError` past the limit."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit = limit if limit is not None else max(1, int(os.environ.get(MAX_FAILURES_ENV, "20")))
        self.consecutive = 0
        self.total = 0
        self._last = ""

    def ok(self) -> None:
        """One loop iteration finished without a failure."""
        self.consecutive = 0

    def failed(self, where: str, exc: BaseException) -> None:
        """Record a failure outside any request; raises when the scheduler must stop."""
        what = describe_fault(exc)
        if fail_fast(exc):
            raise SchedulerFatalError(f"{where} failed: {what}; SGLANG_PLUGINS_STRICT=1 stops on the first hook fault") from exc
        self.consecutive += 1
        self.total += 1
        if what != self._last:
            logger.error("%s failed (%d in a row, the scheduler stops at %d): %s", where, self.consecutive, self.limit, what, exc_info=exc)
            self._last = what
        else:
            logger.warning("%s failed again (%d in a row, the scheduler stops at %d): %s", where, self.consecutive, self.limit, what)
        if self.consecutive >= self.limit:
            raise SchedulerFatalError(
                f"the scheduler stopped after {self.consecutive} consecutive failures of {where}: {what} "
                f"(limit {MAX_FAILURES_ENV}={self.limit})"
            ) from exc
        time.sleep(min(0.05 * self.consecutive, 0.5))  # a fault on every loop must not spin or flood the log


class FaultContainment:
    """The scheduler's per-request fault handling (a mixin of ``Scheduler``, which provides the
    queues, ``grammars``, ``live``, ``outbox``, ``guard``, ``run_batch``, ``process_batch_result`` and ``_release``)."""

    live: dict[str, Req]
    waiting: deque[Req]
    running: list[Req]
    chunked_req: Req | None
    outbox: list[Any]
    guard: LoopGuard
    grammars: GrammarQueue

    def fail_request(self, req: Req, exc: BaseException | str) -> None:
        """End ``req`` with an error its client receives; its pages go back. Idempotent."""
        message = exc if isinstance(exc, str) else describe_fault(exc)
        if self.live.pop(req.rid, None) is None and req.finished_reason is not None:
            return
        logger.error("request %s failed: %s", req.rid, message, exc_info=None if isinstance(exc, str) else exc)
        if req in self.waiting:
            self.waiting.remove(req)
        if req in self.running:
            self.running.remove(req)
        if self.chunked_req is req:
            self.chunked_req = None
        try:
            self._release(req, cache=False)
        except Exception:  # the pages of a request whose bookkeeping broke are leaked, not double-freed
            logger.exception("could not release the KV pages of failed request %s", req.rid)
            req.pages, req.last_node, req.shared_pages = [], None, 0
        req.finished_reason = {"type": "abort", "message": message}
        self.outbox.append(SchedulerError(req.rid, f"the request failed in the engine: {message}", 500))

    def _sweep_orphans(self, exc: BaseException) -> None:
        """After a failed step: fail every admitted request that no queue holds any more."""
        held = {id(r) for r in (*self.waiting, *self.running, *([self.chunked_req] if self.chunked_req else []), *self.grammars.holds(),
                                *(self.disagg.holds() if self.disagg is not None else ()))}
        for req in list(self.live.values()):
            if req.finished_reason is not None:
                self.live.pop(req.rid, None)
            elif id(req) not in held:
                self.fail_request(req, exc)

    def _run_one_by_one(self, batch: ScheduleBatch, exc: BaseException) -> None:
        """The batch's forward raised: run each request alone so only those that raise fail.

        Re-running rewrites the same KV slots, so the requests that succeed are unaffected.
        """
        if len(batch.reqs) == 1:
            self.fail_request(batch.reqs[0], exc)
            return
        logger.warning("a batch of %d requests failed (%s); running them one by one", len(batch.reqs), describe_fault(exc))
        for i, (req, n) in enumerate(zip(batch.reqs, batch.extend_lens)):
            single = ScheduleBatch(batch.mode, [req], [n], batch.drafts[i : i + 1], batch.draft_probs[i : i + 1])
            try:
                result = self.run_batch(single)
            except Exception as one:
                if fail_fast(one):
                    raise
                self.fail_request(req, one)
                continue
            self.process_batch_result(single, result)

    def _handle_safely(self, msg: Any) -> None:
        try:
            self.handle(msg)
        except Exception as exc:
            if fail_fast(exc):
                raise
            rid = getattr(msg, "rid", None)
            req = self.live.get(rid) if isinstance(rid, str) else None
            if req is not None:
                self.fail_request(req, exc)
            elif isinstance(msg, TokenizedGenerateReqInput):
                logger.error("request %s could not be admitted: %s", msg.rid, describe_fault(exc), exc_info=exc)
                self.outbox.append(SchedulerError(msg.rid, f"the request failed in the engine: {describe_fault(exc)}", 500))
            else:
                self.guard.failed(f"Scheduler.handle({type(msg).__name__})", exc)
