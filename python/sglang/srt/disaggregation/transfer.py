"""The transfer engines behind ``--disaggregation-transfer-backend``: one registry, one interface.

:class:`MooncakeTransfer` wraps Mooncake's ``TransferEngine`` with its peer-to-peer handshake (no
metadata server): TCP unless an RDMA device is named (``--disaggregation-ib-device``).
:class:`FakeTransfer` (``fake``, decode servers only, as upstream) moves nothing: a decode server that uses
it serves requests with no prefill server, to measure its decoding alone."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from sglang.srt.disaggregation.base import KVTransferError

logger = logging.getLogger(__name__)

# Slices per batched write: Mooncake's TCP transport rejects a batch larger than its lane queue ("TCP lane
# queue-full rejection", the write fails); fragmented pages make one slice per page and buffer.
MAX_BATCH = 256


class MooncakeTransfer:
    """Registers local memory; writes local ranges into a peer session's registered memory."""

    moves_kv = True

    def __init__(self, host: str, ib_device: str | None, force_tcp: bool) -> None:
        from sglang.srt.arg_groups.disagg import check_mooncake

        check_mooncake()
        from mooncake.engine import TransferEngine

        self.engine = TransferEngine()
        protocol = "tcp" if force_tcp or not ib_device else "rdma"
        rc = self.engine.initialize(host, "P2PHANDSHAKE", protocol, ib_device or "")
        if rc != 0:
            raise KVTransferError(f"Mooncake's transfer engine did not start on {host} ({protocol}, device {ib_device!r}): code {rc}")
        self.session = f"{host}:{self.engine.get_rpc_port()}"

    def register(self, ptr: int, length: int) -> None:
        rc = self.engine.register_memory(ptr, length)
        if rc != 0:
            raise KVTransferError(f"Mooncake could not register {length} bytes at {ptr:#x}: code {rc}")

    def write(self, peer: str, srcs: list[int], dsts: list[int], lengths: list[int]) -> None:
        """Write every ``(src, dst, length)`` into ``peer``'s memory; raises :class:`KVTransferError`."""
        for i in range(0, len(srcs), MAX_BATCH):
            rc = self.engine.batch_transfer_sync_write(peer, srcs[i : i + MAX_BATCH], dsts[i : i + MAX_BATCH], lengths[i : i + MAX_BATCH])
            if rc != 0:
                raise KVTransferError(f"Mooncake's write to {peer} failed (code {rc}): the decode server is unreachable or gone")


class FakeTransfer:
    """``--disaggregation-transfer-backend fake``: no engine, no peer. The decode side asks no prefill server
    for anything: each request's pages count as written as soon as they are allocated (their KV is whatever
    the pool holds, so the text is meaningless; the flow, the scheduling and the timings are real)."""

    moves_kv = False
    session = "fake"

    def register(self, ptr: int, length: int) -> None:
        """Nothing to register: no peer ever writes here."""

    def write(self, peer: str, srcs: list[int], dsts: list[int], lengths: list[int]) -> None:
        raise KVTransferError("--disaggregation-transfer-backend fake moves no KV; a prefill server cannot use it "
                              "(start the prefill server with mooncake)")


Transfer = MooncakeTransfer | FakeTransfer

# --disaggregation-transfer-backend's registry (arg_groups.disagg checks a name against it at start-up)
BACKENDS: dict[str, Callable[[str, Any], Transfer]] = {
    "mooncake": lambda host, bag: MooncakeTransfer(host, bag.disaggregation_ib_device, force_tcp=False),
    "mooncake_tcp": lambda host, bag: MooncakeTransfer(host, None, force_tcp=True),
    "fake": lambda host, bag: FakeTransfer(),
}


def create_transfer(name: str, host: str, bag: Any) -> Transfer:
    """The transfer engine ``name`` (a ``--disaggregation-transfer-backend`` value) on ``host``."""
    if name not in BACKENDS:
        raise KVTransferError(f"--disaggregation-transfer-backend {name} has no transfer engine here; use one of {', '.join(BACKENDS)}")
    return BACKENDS[name](host, bag)
