"""The control plane of the KV transfer, one manager per scheduler.

Messages are JSON over ZMQ (never pickles: peers are other machines). Each side binds an inbox:

- decode -> prefill ``{"type": "pages", "room", "endpoint", "session", "pages", "prefix_pages", "aux", "layout"}``:
  where the prefill side writes ``room``'s KV pages (those after the first ``prefix_pages`` of the prompt,
  which a decode server with a prefix cache already holds) and first token; ``{"type": "abort", "room"}``: the decode side
  gave the request up.
- prefill -> decode ``{"type": "done", "room", "ok", "error"}``: after the write (or its failure).

The bytes themselves go through the transfer engine: the prefill side writes its pages into the decode
side's registered KV buffers, and the first token (with its log-probabilities) into a registered row of
the decode side's ``aux`` buffer (see :func:`pack_first_token`).
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import socket
import threading
import time
import urllib.request
from typing import Any

import torch
import zmq

from sglang.srt.disaggregation.base import KVLayout, KVTransferError, page_runs
from sglang.srt.disaggregation.transfer import create_transfer
from sglang.srt.sampling.sampling_params import MAX_TOP_LOGPROBS

logger = logging.getLogger(__name__)

AUX_WIDTH = 3 + 2 * MAX_TOP_LOGPROBS  # a float64 row: token, logprob, top count, top ids, top logprobs
AUX_BYTES = AUX_WIDTH * 8


def pack_first_token(token: int, info: Any) -> list[float]:
    """The aux row of a first token and its ``(logprob, [(id, logprob), ...])`` info (or ``None``)."""
    row = [0.0] * AUX_WIDTH
    row[0] = float(token)
    if info is not None:
        lp, top = info
        row[1], row[2] = lp, float(len(top))
        for i, (t, v) in enumerate(top[:MAX_TOP_LOGPROBS]):
            row[3 + i], row[3 + MAX_TOP_LOGPROBS + i] = float(t), v
    else:
        row[2] = -1.0
    return row


def unpack_first_token(row: list[float]) -> tuple[int, Any]:
    n = int(row[2])
    if n < 0:
        return int(row[0]), None
    return int(row[0]), (row[1], [(int(row[3 + i]), row[3 + MAX_TOP_LOGPROBS + i]) for i in range(n)])


def local_address(host: str) -> str:
    """An address peers can reach this machine at: ``host``, or this machine's name's address for a wildcard."""
    if host in ("", "0.0.0.0", "::"):
        return socket.gethostbyname(socket.gethostname())
    return host


class _Plane:
    """An inbox bound on a random port and PUSH sockets to peers' inboxes (one thread uses each)."""

    def __init__(self, host: str) -> None:
        self.ctx = zmq.Context(1)
        self.inbox = self.ctx.socket(zmq.PULL)
        self.endpoint = f"tcp://{host}:{self.inbox.bind_to_random_port(f'tcp://{host}')}"
        self._peers: dict[tuple[int, str], zmq.Socket] = {}

    def send(self, endpoint: str, msg: dict[str, Any]) -> bool:
        """Queue ``msg`` for ``endpoint`` without blocking; False when it cannot be queued."""
        key = (threading.get_ident(), endpoint)
        sock = self._peers.get(key)
        if sock is None:
            sock = self._peers[key] = self.ctx.socket(zmq.PUSH)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.SNDHWM, 10000)
            sock.connect(endpoint)
        try:
            sock.send(json.dumps(msg).encode(), zmq.NOBLOCK)
        except zmq.ZMQError:
            return False
        return True

    def receive(self, timeout_ms: int = 0) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if timeout_ms and not self.inbox.poll(timeout_ms):
            return out
        while True:
            try:
                raw = self.inbox.recv(zmq.NOBLOCK)
            except zmq.Again:
                return out
            try:
                msg = json.loads(raw)
            except ValueError:
                logger.warning("KV control plane: dropped a message that is not JSON")
                continue
            if isinstance(msg, dict) and isinstance(msg.get("room"), int):
                out.append(msg)

    def close(self) -> None:
        self.ctx.destroy(linger=0)


class _Side:
    """What both managers hold: the transfer engine with the KV pool registered, and the control plane."""

    def __init__(self, pool: Any, num_pages: int, bag: Any, host: str) -> None:
        self.host = local_address(host)
        self.transfer = create_transfer(bag.disaggregation_transfer_backend, self.host, bag)
        self.layout = KVLayout.of_pool(pool)
        for ptr, length in self.layout.buffers(num_pages):
            self.transfer.register(ptr, length)
        self.plane = _Plane(self.host)


class PrefillKVManager(_Side):
    """Registers at the bootstrap endpoint; writes finished prefills into decode servers on a worker thread."""

    def __init__(self, pool: Any, num_pages: int, bag: Any, host: str) -> None:
        super().__init__(pool, num_pages, bag, host)
        self.staging = torch.zeros(AUX_WIDTH, dtype=torch.float64)  # the worker's one aux row
        self.transfer.register(self.staging.data_ptr(), AUX_BYTES)
        self.worker = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="disagg-transfer")
        self._register(host, bag.disaggregation_bootstrap_port)

    def _register(self, host: str, port: int) -> None:
        body = json.dumps({"endpoint": self.plane.endpoint, "session": self.transfer.session, "layout": self.layout.wire()}).encode()
        url = f"http://{'127.0.0.1' if host in ('', '0.0.0.0') else host}:{port}/route"
        deadline, last = time.monotonic() + 30, None
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(urllib.request.Request(url, body, method="PUT"), timeout=5):
                    return
            except OSError as exc:
                last = exc
                time.sleep(0.2)
        raise KVTransferError(f"prefill: could not register at the bootstrap endpoint {url}: {last}")

    def send(self, meta: dict[str, Any], pages: list[int], token: int, info: Any) -> concurrent.futures.Future[float]:
        """Write ``pages`` into the decode side's ``meta["pages"]`` and the first token into its aux row, then
        tell it; the future's result is the write time in seconds (it raises :class:`KVTransferError`)."""
        return self.worker.submit(self._write, meta, list(pages), pack_first_token(token, info))

    def _write(self, meta: dict[str, Any], pages: list[int], row: list[float]) -> float:
        t0 = time.perf_counter()
        room, peer = meta["room"], meta["session"]
        try:
            dst = meta["pages"]
            if len(dst) < len(pages):
                raise KVTransferError(f"the decode server sent {len(dst)} pages for a prompt that needs {len(pages)}")
            srcs, dsts, lens = [], [], []
            for s, d, n in page_runs(pages, dst[: len(pages)]):
                for src_ptr, dst_ptr, width in zip(self.layout.ptrs, meta["layout"]["ptrs"], self.layout.page_bytes):
                    srcs.append(src_ptr + s * width)
                    dsts.append(dst_ptr + d * width)
                    lens.append(n * width)
            self.transfer.write(peer, srcs, dsts, lens)
            self.staging.copy_(torch.tensor(row, dtype=torch.float64))
            self.transfer.write(peer, [self.staging.data_ptr()], [meta["aux"]], [AUX_BYTES])
        except Exception as exc:
            error = f"prefill: writing the KV of bootstrap_room {room} to the decode server at {peer} failed: {exc}"
            self.plane.send(meta["endpoint"], {"type": "done", "room": room, "ok": False, "error": error})
            raise KVTransferError(error) from None
        done = {"type": "done", "room": room, "ok": True, "input_logprobs": meta.get("input_logprobs")}
        if not self.plane.send(meta["endpoint"], done):
            raise KVTransferError(f"prefill: the decode server at {meta['endpoint']} does not take messages")
        return time.perf_counter() - t0

    def close(self) -> None:
        self.worker.shutdown(wait=False, cancel_futures=True)
        self.plane.close()


class DecodeKVManager(_Side):
    """Looks prefill servers up, sends them page lists, watches their heartbeat; owns the aux rows."""

    def __init__(self, pool: Any, num_pages: int, bag: Any, host: str, slots: int, heartbeat_s: float) -> None:
        super().__init__(pool, num_pages, bag, host)
        self.aux = torch.zeros(slots, AUX_WIDTH, dtype=torch.float64)
        self.transfer.register(self.aux.data_ptr(), slots * AUX_BYTES)
        self.free_aux = list(range(slots - 1, -1, -1))
        self.lookups = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="disagg-bootstrap")
        self.routes: dict[str, concurrent.futures.Future[dict[str, Any]]] = {}
        self.failures: dict[str, int] = {}  # consecutive failed heartbeats per prefill bootstrap address
        self.watched: set[str] = set()
        self.heartbeat_s = heartbeat_s
        self._stop = threading.Event()
        threading.Thread(target=self._heartbeat, daemon=True, name="disagg-heartbeat").start()

    def route(self, addr: str) -> concurrent.futures.Future[dict[str, Any]]:
        """The prefill scheduler's registration at bootstrap ``addr`` (``host:port``), looked up once."""
        fut = self.routes.get(addr)
        if fut is None or (fut.done() and fut.exception() is not None):
            fut = self.routes[addr] = self.lookups.submit(self._lookup, addr)
        return fut

    def _lookup(self, addr: str) -> dict[str, Any]:
        url = f"http://{addr}/route"
        deadline, last = time.monotonic() + 10, ""
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url, timeout=3) as r:
                    route = json.loads(r.read())
                problem = self.layout.mismatch(route.get("layout") or {})
                if problem is not None:
                    raise KVTransferError(f"decode: the prefill server at {addr} has a different KV layout: {problem}")
                return route
            except KVTransferError:
                raise
            except OSError as exc:
                last = str(exc)
                time.sleep(0.2)
        raise KVTransferError(f"decode: the prefill server's bootstrap endpoint at {addr} does not answer ({last}); check "
                              "bootstrap_host/bootstrap_port and the prefill server's --disaggregation-bootstrap-port")

    def send_pages(self, route: dict[str, Any], room: int, pages: list[int], slot: int, prefix_pages: int = 0) -> bool:
        """Tell the prefill server where ``room``'s prompt pages after the first ``prefix_pages`` (cached here) go."""
        return self.plane.send(route["endpoint"], {"type": "pages", "room": room, "endpoint": self.plane.endpoint,
                                                   "session": self.transfer.session, "pages": pages, "prefix_pages": prefix_pages,
                                                   "aux": self.aux.data_ptr() + slot * AUX_BYTES, "layout": self.layout.wire()})

    def send_abort(self, route: dict[str, Any], room: int) -> None:
        self.plane.send(route["endpoint"], {"type": "abort", "room": room})

    def first_token(self, slot: int) -> tuple[int, Any]:
        return unpack_first_token(self.aux[slot].tolist())

    def dead(self, addr: str, max_failures: int) -> bool:
        return self.failures.get(addr, 0) >= max_failures

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            for addr in list(self.watched):
                try:
                    with urllib.request.urlopen(f"http://{addr}/health", timeout=min(self.heartbeat_s, 2.0)):
                        self.failures[addr] = 0
                except OSError:
                    self.failures[addr] = self.failures.get(addr, 0) + 1
                    self.routes.pop(addr, None)  # a restarted prefill server registers a new route

    def close(self) -> None:
        self._stop.set()
        self.lookups.shutdown(wait=False, cancel_futures=True)
        self.plane.close()
