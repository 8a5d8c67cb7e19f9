"""The prefill server's side of the scheduler (``--disaggregation-mode prefill``).

A request carrying a ``bootstrap_room`` waits in the *bootstrap queue* until its decode server sends the
page list for that room (:class:`~sglang.srt.disaggregation.kv_manager.PrefillKVManager`), then joins the
scheduler's waiting queue and is prefilled as any other (chunked, with the prefix cache). Its first token
is not decoded on: the pages and the token go to the decode server (*in flight*), then the request ends
here with that one token and its pages are cached or freed. A request without a room is served here from
prompt to end.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any

from sglang.srt.arg_groups.disagg import Timeouts
from sglang.srt.disaggregation.base import KVPoll
from sglang.srt.disaggregation.kv_manager import PrefillKVManager
from sglang.srt.managers.schedule_batch import Req
from sglang.srt.managers.scheduler_output import check_finished
from sglang.srt.runtime_context import get_disagg

logger = logging.getLogger(__name__)

IDLE_WAIT_MS = 5  # an idle loop waits this long on the control plane before it looks at its own sockets again


class PrefillSide:
    def __init__(self, sched: Any, timeouts: Timeouts) -> None:
        self.s = sched
        self.timeouts = timeouts
        runner = sched.tp_worker.model_runner
        self.manager = PrefillKVManager(runner.kv_pool, sched.allocator.num_pages, get_disagg(), sched.server_args.host)
        self.bootstrapping: dict[int, tuple[Req, float]] = {}  # room -> request waiting for its page list
        self.page_lists: dict[int, tuple[dict[str, Any], float]] = {}  # room -> page list that came before its request
        self.inflight: dict[str, tuple[Req, Any]] = {}  # rid -> request whose pages are being written, and the write
        self.transfer_s: deque[float] = deque(maxlen=256)
        self.failed = 0

    def state(self, req: Req) -> KVPoll:
        if req.rid in self.inflight:
            return KVPoll.Transferring
        return KVPoll.Bootstrapping if req.disagg is None else KVPoll.WaitingForInput

    # -- the scheduler's calls ------------------------------------------------------
    def add(self, req: Req) -> bool:
        """Take a request that names a room (False: the scheduler serves it as usual)."""
        if req.bootstrap is None or req.params.max_new_tokens == 0:
            return False
        room = req.bootstrap["room"]
        if room in self.bootstrapping:
            self.s.fail_request(req, f"prefill: bootstrap_room {room} is already in use by a waiting request; send a fresh room")
            return True
        self.bootstrapping[room] = (req, time.monotonic())
        self._claim(room)
        return True

    def after_first_token(self, req: Req, token: int, info: Any) -> bool:
        """Hand a prefilled request's pages and first token to its decode server (True: taken)."""
        if req.disagg is None or req.output_ids != [token]:
            return False
        if req.aborted:
            self._tell_failed(req.disagg, "prefill: the request was aborted on the prefill server")
            return False
        skip = req.disagg["prefix_pages"]  # the decode server's prefix cache holds these
        pages = req.pages[skip : -(-len(req.origin_input_ids) // self.s.page_size)]
        meta = dict(req.disagg, input_logprobs=req.input_logprobs if req.input_lp_from is not None else None)
        self.inflight[req.rid] = (req, self.manager.send(meta, pages, token, info))
        return True

    def abort(self, rid: str) -> bool:
        for room, (req, _) in list(self.bootstrapping.items()):
            if req.rid == rid:
                del self.bootstrapping[room]
                self.s.live.pop(rid, None)
                req.finished_reason = {"type": "abort"}
                self.s.outbox.append(self.s.build_output([req]))
                if room in self.page_lists:
                    self._tell_failed(self.page_lists.pop(room)[0], "prefill: the request was aborted on the prefill server")
                return True
        for req in self.s.waiting:  # claimed, not yet prefilled: its decode server stops waiting for it
            if req.rid == rid and req.disagg is not None:
                self._tell_failed(req.disagg, "prefill: the request was aborted on the prefill server")
        return False  # queued or running: the scheduler aborts it; in flight: it ends when its write does

    def holds(self) -> list[Req]:
        return [r for r, _ in self.bootstrapping.values()] + [r for r, _ in self.inflight.values()]

    def busy(self) -> bool:
        return bool(self.bootstrapping or self.inflight)

    def queues(self) -> dict[str, float]:
        recent = list(self.transfer_s)
        return {"num_prefill_bootstrap_queue_reqs": len(self.bootstrapping), "num_prefill_inflight_queue_reqs": len(self.inflight),
                "num_transfer_failed_reqs_total": self.failed,
                "kv_transfer_latency_ms": round(1000 * sum(recent) / len(recent), 3) if recent else 0.0}

    def poll(self, idle: bool) -> None:
        now = time.monotonic()
        for msg in self.manager.plane.receive(IDLE_WAIT_MS if idle else 0):  # a write that ends is seen within IDLE_WAIT_MS
            if msg.get("type") == "pages":
                self.page_lists[msg["room"]] = (msg, now)
                self._claim(msg["room"])
            elif msg.get("type") == "abort":
                self._decode_gave_up(msg["room"])
        for rid, (req, fut) in list(self.inflight.items()):
            if fut.done():
                del self.inflight[rid]
                self._finish(req, fut)
        limit = self.timeouts.bootstrap
        for room, (req, t0) in list(self.bootstrapping.items()):
            if now - t0 > limit:
                del self.bootstrapping[room]
                self.failed += 1
                self.s.fail_request(req, f"prefill: no decode server sent its page list for bootstrap_room {room} within {limit:.0f}s "
                                         "(SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT): send the request to a decode server too (the router does)")
        for room, (meta, t0) in list(self.page_lists.items()):
            if now - t0 > limit:
                del self.page_lists[room]
                self._tell_failed(meta, f"prefill: no request with bootstrap_room {room} arrived within {limit:.0f}s "
                                        "(SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT)")

    # -- internals ---------------------------------------------------------------------
    def _claim(self, room: int) -> None:
        if room not in self.bootstrapping or room not in self.page_lists:
            return
        (req, _), (meta, _) = self.bootstrapping.pop(room), self.page_lists.pop(room)
        prompt_pages = -(-len(req.origin_input_ids) // self.s.page_size)
        skip = meta.get("prefix_pages", 0)
        if not isinstance(skip, int) or isinstance(skip, bool) or not 0 <= skip <= prompt_pages:
            self._tell_failed(meta, f"prefill: prefix_pages {skip!r} does not fit a prompt of {prompt_pages} pages")
            self.s.fail_request(req, f"prefill: the decode server's page list for bootstrap_room {room} is malformed")
            return
        meta["prefix_pages"] = skip
        need = prompt_pages - skip
        if len(meta.get("pages") or []) < need:
            self._tell_failed(meta, f"prefill: the decode server sent {len(meta.get('pages') or [])} pages; the prompt needs {need}")
            self.s.fail_request(req, f"prefill: the decode server's page list for bootstrap_room {room} is too short")
            return
        req.disagg = meta
        self.s.waiting.append(req)

    def _decode_gave_up(self, room: int) -> None:
        listed = self.page_lists.pop(room, None)
        if listed is not None:  # nothing will be written into those pages: the decode side may reuse them now
            self._tell_failed(listed[0], f"prefill: dropped bootstrap_room {room} as the decode server asked")
        entry = self.bootstrapping.pop(room, None)
        req = entry[0] if entry else next((r for r in self.s.waiting if r.disagg is not None and r.disagg["room"] == room), None)
        if req is not None:
            self.failed += 1
            if req.disagg is not None:  # the decode side holds its pages until told nothing more is written
                self._tell_failed(req.disagg, f"prefill: dropped bootstrap_room {room} as the decode server asked")
            self.s.fail_request(req, f"prefill: the decode server gave up bootstrap_room {room}")

    def _finish(self, req: Req, fut: Any) -> None:
        exc = fut.exception()
        if exc is not None:
            self.failed += 1
            self.s.fail_request(req, str(exc))
            return
        self.transfer_s.append(fut.result())
        tok = req.output_ids[-1]
        reason = check_finished(req, tok, self.s.eos_ids, self.s.tokenizer, self.s.context_length)
        req.finished_reason = reason or {"type": "length", "length": 1}
        self.s.live.pop(req.rid, None)
        self.s._release(req, cache=True)
        out = self.s.build_output([req])
        if out is not None:
            self.s.outbox.append(out)

    def _tell_failed(self, meta: dict[str, Any], error: str) -> None:
        self.manager.plane.send(meta["endpoint"], {"type": "done", "room": meta["room"], "ok": False, "error": error})

    def close(self) -> None:
        self.manager.close()
