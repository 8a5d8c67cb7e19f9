"""The torch.distributed store of one rank takes another free port when its own was taken meanwhile."""

from __future__ import annotations

import datetime
import socket

import pytest

from sglang.utils.dist_store import bound_store


def _taken() -> tuple[socket.socket, int]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    return s, s.getsockname()[1]


def test_a_group_of_one_moves_to_a_free_port_when_its_port_was_taken():
    holder, port = _taken()
    try:
        store = bound_store(f"tcp://127.0.0.1:{port}", 1, 0, datetime.timedelta(seconds=10))
        store.set("k", "v")
        assert store.get("k") == b"v" and store.port != port
    finally:
        holder.close()


def test_a_larger_group_keeps_the_error_since_its_peers_need_the_port():
    holder, port = _taken()
    try:
        with pytest.raises(OSError, match="in use"):
            bound_store(f"tcp://127.0.0.1:{port}", 2, 0, datetime.timedelta(seconds=10))
    finally:
        holder.close()
