"""The decode server's side of the scheduler (``--disaggregation-mode decode``).

A request goes through three queues before it decodes:

1. *bootstrapping*: its prefill server's registration is looked up at ``bootstrap_host:bootstrap_port``;
2. *pre-allocation* (``WaitingForInput``): in arrival order, once KV pages for the prompt plus
   ``--num-reserved-decode-tokens`` (at most ``max_new_tokens``) and an aux row are free, they are taken
   and the page list goes to the prefill server;
3. *transfer* (``Transferring``): until the prefill server says the pages and the first token are written.

Then it joins the running batch with its first token, as if it had been prefilled here. Every wait is
bounded (``SGLANG_DISAGGREGATION_WAITING_TIMEOUT``), and a prefill server whose bootstrap endpoint stops
answering (``SGLANG_DISAGGREGATION_HEARTBEAT_*``) fails its requests at once. Pages a prefill server may
still be writing are held back (*draining*) until it answers or the wait times out, never reused early.

With ``--disaggregation-decode-enable-radix-cache`` the decode server keeps a prefix cache (as upstream): at
pre-allocation the prompt's longest cached page-aligned prefix is locked and only the pages after it are
allocated and sent for (``prefix_pages``); a request that ends caches its pages here.

With ``--disaggregation-transfer-backend fake`` (or a request whose ``bootstrap_host`` is upstream's sentinel
``2.2.2.2``) there is no prefill server: the request skips (1), and (3) ends as soon as (2) has its pages.
Those pages hold whatever the pool held and the first token is the prompt's last token (upstream reads an
unwritten metadata row instead): the text means nothing, the flow and the decoding work are real.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from sglang.srt.arg_groups.disagg import Timeouts
from sglang.srt.disaggregation.base import KVPoll
from sglang.srt.disaggregation.kv_manager import DecodeKVManager
from sglang.srt.managers.bootstrap_fields import FAKE_BOOTSTRAP_HOST
from sglang.srt.managers.schedule_batch import Req
from sglang.srt.managers.scheduler_output import check_finished
from sglang.srt.runtime_context import get_disagg, get_schedule

logger = logging.getLogger(__name__)

IDLE_WAIT_MS = 5


@dataclass
class _Entry:
    req: Req
    addr: str  # the prefill server's bootstrap host:port
    room: int
    since: float
    state: KVPoll = KVPoll.Bootstrapping
    route: dict[str, Any] | None = None
    slot: int | None = None
    fake: bool = False  # no prefill server: no lookup, no transfer, no heartbeat


class DecodeSide:
    def __init__(self, sched: Any, timeouts: Timeouts) -> None:
        self.s = sched
        self.timeouts = timeouts
        runner = sched.tp_worker.model_runner
        slots = 2 * (get_schedule().max_running_requests or 64) + 16
        self.manager = DecodeKVManager(runner.kv_pool, sched.allocator.num_pages, get_disagg(), sched.server_args.host, slots,
                                       timeouts.heartbeat)
        self.reserve = get_disagg().num_reserved_decode_tokens
        self.fake_backend = not self.manager.transfer.moves_kv
        self.entries: dict[str, _Entry] = {}  # rid -> entry, in arrival order
        self.rooms: dict[tuple[str, int], str] = {}  # (prefill address, room) -> rid
        self.draining: dict[tuple[str, int], tuple[list[int], int, float]] = {}  # pages and aux row a prefill may still write
        self.failed = 0

    # -- the scheduler's calls ------------------------------------------------------
    def add(self, req: Req) -> bool:
        if req.bootstrap is None or req.params.max_new_tokens == 0:
            return False  # nothing to decode: served here (prompt log-probabilities only)
        fake = self.fake_backend or req.bootstrap["host"] == FAKE_BOOTSTRAP_HOST
        if fake and self.s.tree is not None:
            self.s.fail_request(req, f"decode: bootstrap_host {FAKE_BOOTSTRAP_HOST} (no transfer) is refused on a decode server with "
                                     "--disaggregation-decode-enable-radix-cache: its unwritten KV would enter the prefix cache")
            return True
        addr, room = "fake" if fake else f"{req.bootstrap['host']}:{req.bootstrap['port']}", req.bootstrap["room"]
        if (addr, room) in self.rooms or (addr, room) in self.draining:
            self.s.fail_request(req, f"decode: bootstrap_room {room} of the prefill server at {addr} is already in use; send a fresh room")
            return True
        self.rooms[(addr, room)] = req.rid
        if fake:
            self.entries[req.rid] = _Entry(req, addr, room, time.monotonic(), KVPoll.WaitingForInput, fake=True)
            return True
        if self.manager.dead(addr, self.timeouts.heartbeat_failures) and not any(e.addr == addr for e in self.entries.values()):
            self.manager.failures.pop(addr, None)  # a prefill server that was gone may be back: its lookup decides
        self.entries[req.rid] = _Entry(req, addr, room, time.monotonic())
        self.manager.route(addr)
        return True

    def after_first_token(self, req: Req, token: int, info: Any) -> bool:
        return False  # a request retracted here is prefilled again here, and decodes on as usual

    def abort(self, rid: str) -> bool:
        entry = self.entries.get(rid)
        if entry is None:
            return False
        self._drop(entry, "abort")
        entry.req.finished_reason = {"type": "abort"}
        self.s.live.pop(rid, None)
        self.s.outbox.append(self.s.build_output([entry.req]))
        return True

    def holds(self) -> list[Req]:
        return [e.req for e in self.entries.values()]

    def busy(self) -> bool:
        return bool(self.entries or self.draining)

    def queues(self) -> dict[str, float]:
        states = [e.state for e in self.entries.values()]
        return {"num_decode_prealloc_queue_reqs": sum(s is not KVPoll.Transferring for s in states),
                "num_decode_transfer_queue_reqs": sum(s is KVPoll.Transferring for s in states),
                "num_transfer_failed_reqs_total": self.failed}

    def poll(self, idle: bool) -> None:
        now = time.monotonic()
        for msg in self.manager.plane.receive(IDLE_WAIT_MS if idle else 0):  # an idle loop does not spin while lookups run
            if msg.get("type") == "done":
                self._done(msg)
        for entry in list(self.entries.values()):
            if entry.state is KVPoll.Bootstrapping:
                fut = self.manager.route(entry.addr)
                if fut.done():
                    if fut.exception() is not None:
                        self._fail(entry, str(fut.exception()))
                    else:
                        entry.route, entry.state = fut.result(), KVPoll.WaitingForInput
        for entry in list(self.entries.values()):
            if entry.state is KVPoll.WaitingForInput and not self._preallocate(entry):
                break  # in arrival order: a later request does not overtake one that waits for pages
        self.manager.watched = {e.addr for e in self.entries.values() if not e.fake} | {a for a, _ in self.draining}
        for entry in list(self.entries.values()):
            if not entry.fake and self.manager.dead(entry.addr, self.timeouts.heartbeat_failures):
                self._fail(entry, f"decode: the prefill server at {entry.addr} stopped answering its bootstrap endpoint "
                                  f"({self.timeouts.heartbeat_failures} heartbeats failed); its requests fail", prefill_gone=True)
            elif now - entry.since > self.timeouts.waiting:
                self._fail(entry, f"decode: no KV arrived from the prefill server at {entry.addr} within {self.timeouts.waiting:.0f}s "
                                  f"(SGLANG_DISAGGREGATION_WAITING_TIMEOUT; the request was {entry.state.name})")
        for key, (_, _, deadline) in list(self.draining.items()):
            if now > deadline or self.manager.dead(key[0], self.timeouts.heartbeat_failures):
                self._release_drained(key)

    # -- internals ---------------------------------------------------------------------
    def _lock_prefix(self, req: Req) -> list[int]:
        """With a prefix cache here: lock the prompt's longest cached page-aligned prefix for ``req``."""
        tree = self.s.tree
        if tree is None:
            return []
        ps = self.s.page_size
        pages, node = tree.match_prefix(req.origin_input_ids[: len(req.origin_input_ids) // ps * ps], req.lora_id)
        tree.inc_lock_ref(node)  # before allocating: the allocation may evict unlocked pages
        req.last_node, req.shared_pages = node, len(pages)
        return list(pages)

    def _unlock_prefix(self, req: Req) -> None:
        if req.last_node is not None:
            self.s.tree.dec_lock_ref(req.last_node)
        req.last_node, req.shared_pages = None, 0

    def _preallocate(self, entry: _Entry) -> bool:
        req = entry.req
        prompt = len(req.origin_input_ids)
        tokens = min(prompt + min(self.reserve, req.params.max_new_tokens), self.s.max_total_tokens)
        prefix = self._lock_prefix(req)
        pages = self.s._alloc(-(-tokens // self.s.page_size) - len(prefix))
        if pages is None:
            self._unlock_prefix(req)
            return False
        pages.sort()  # any order holds the prompt; ascending makes the longest runs of one write each
        if entry.fake:  # nothing to transfer: "written" at once (upstream's fake receiver reports success at once)
            req.pages = pages
            del self.entries[req.rid]
            del self.rooms[(entry.addr, entry.room)]
            token = req.origin_input_ids[-1]
            info = (0.0, [(token, 0.0)][: req.params.top_logprobs_num]) if req.params.logprobs else None
            self._start_decoding(req, token, info, None)
            return True
        if not self.manager.free_aux:
            self.s.allocator.free(pages)
            self._unlock_prefix(req)
            return False
        entry.slot = self.manager.free_aux.pop()
        req.pages = prefix + pages
        req.cached_tokens = len(prefix) * self.s.page_size
        assert entry.route is not None
        if not self.manager.send_pages(entry.route, entry.room, pages, entry.slot, len(prefix)):
            self._fail(entry, f"decode: the prefill server at {entry.addr} does not take messages at {entry.route['endpoint']}")
            return True
        entry.state = KVPoll.Transferring
        return True

    def _done(self, msg: dict[str, Any]) -> None:
        room = msg["room"]
        rid = next((r for (a, rm), r in self.rooms.items() if rm == room and self.entries[r].state is KVPoll.Transferring), None)
        if rid is None:
            for key in [k for k in self.draining if k[1] == room]:
                self._release_drained(key)
            return
        entry = self.entries[rid]
        if not msg.get("ok"):
            self._fail(entry, str(msg.get("error") or "the prefill server reported a failed transfer"), prefill_gone=True)
            return
        del self.entries[rid]
        del self.rooms[(entry.addr, entry.room)]
        assert entry.slot is not None
        token, info = self.manager.first_token(entry.slot)
        self.manager.free_aux.append(entry.slot)
        self._start_decoding(entry.req, token, info, msg.get("input_logprobs"))

    def _start_decoding(self, req: Req, token: int, info: Any, input_logprobs: Any) -> None:
        """The prompt's KV is in ``req.pages``: append the first token and join the running batch."""
        s = self.s
        req.kv_len = len(req.origin_input_ids)
        if input_logprobs is not None and req.input_lp_from is not None:
            req.input_logprobs = [(lp, [tuple(x) for x in top]) for lp, top in input_logprobs]
        req.output_ids.append(token)
        req.pending.append(token)
        req.sampler.observe(token)
        if info is not None and req.params.logprobs:
            req.pending_logprobs.append(info)
        grammar = req.sampler.grammar
        if grammar is not None and not grammar.accept_token(token):
            s.fail_request(req, f"decode: the first token {token} from the prefill server breaks the request's constraint")
            return
        req.finished_reason = check_finished(req, token, s.eos_ids, s.tokenizer, s.context_length)
        if req.finished_reason is None and grammar is not None and grammar.is_terminated():
            req.finished_reason = {"type": "stop", "matched": token}
        if req.finished_reason is not None:
            s.live.pop(req.rid, None)
            s._release(req, cache=True)  # with a prefix cache here, the prompt's pages stay cached
        else:
            s.running.append(req)
        out = self.s.build_output([req])
        if out is not None:
            s.outbox.append(out)

    def _drop(self, entry: _Entry, why: str) -> None:
        """Forget ``entry``; pages a live prefill server may still write are drained, not freed."""
        pages = entry.req.pages[entry.req.shared_pages :]  # a cached prefix is never written by the prefill server
        self._unlock_prefix(entry.req)
        self.entries.pop(entry.req.rid, None)
        self.rooms.pop((entry.addr, entry.room), None)
        if entry.route is not None and why != "prefill gone":
            self.manager.send_abort(entry.route, entry.room)  # best effort: the prefill side drops the request
        if entry.state is KVPoll.Transferring and why != "prefill gone":
            assert entry.slot is not None
            self.draining[(entry.addr, entry.room)] = (pages, entry.slot, time.monotonic() + self.timeouts.waiting)
        else:
            if entry.slot is not None:
                self.manager.free_aux.append(entry.slot)
            self.s.allocator.free(pages)
        entry.req.pages = []

    def _fail(self, entry: _Entry, message: str, prefill_gone: bool = False) -> None:
        self._drop(entry, "prefill gone" if prefill_gone else "fail")
        self.failed += 1
        self.s.fail_request(entry.req, message)

    def _release_drained(self, key: tuple[str, int]) -> None:
        pages, slot, _ = self.draining.pop(key)
        self.s.allocator.free(pages)
        self.manager.free_aux.append(slot)

    def close(self) -> None:
        self.manager.close()
