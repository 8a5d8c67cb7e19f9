"""The transfer engines behind ``--disaggregation-transfer-backend``: one registry, one interface.

:class:`MooncakeTransfer` wraps Mooncake's ``TransferEngine`` with its peer-to-peer handshake (no
metadata server): TCP unless an RDMA device is named (``--disaggregation-ib-device``)."""

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


BACKENDS: dict[str, Callable[[str, Any], MooncakeTransfer]] = {
    "mooncake": lambda host, bag: MooncakeTransfer(host, bag.disaggregation_ib_device, force_tcp=False),
    "mooncake_tcp": lambda host, bag: MooncakeTransfer(host, None, force_tcp=True),
}


def create_transfer(name: str, host: str, bag: Any) -> MooncakeTransfer:
    """The transfer engine ``name`` (a ``--disaggregation-transfer-backend`` value) on ``host``."""
    if name not in BACKENDS:
        raise KVTransferError(f"--disaggregation-transfer-backend {name} has no transfer engine here; use one of {', '.join(BACKENDS)}")
    return BACKENDS[name](host, bag)
