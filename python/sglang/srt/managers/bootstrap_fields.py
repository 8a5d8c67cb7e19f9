"""The bootstrap fields of a request (``bootstrap_host``, ``bootstrap_port``, ``bootstrap_room``), checked
where every entry passes (the tokenizer manager) against the server's ``--disaggregation-mode``."""

from __future__ import annotations

import random
from typing import Any

# upstream's sentinel: a decode server runs a request with this bootstrap_host without any transfer (``fake``)
FAKE_BOOTSTRAP_HOST = "2.2.2.2"
ROUTER_HINT = "a router adds them: python -m sglang.srt.disaggregation.mini_lb --prefill URL --decode URL"


def fake_bootstrap() -> dict[str, Any]:
    """The bootstrap fields a request sent straight to a ``fake``-backend decode server gets (as upstream)."""
    return {"host": FAKE_BOOTSTRAP_HOST, "port": 8998, "room": random.randrange(2**63)}


def check_bootstrap(mode: str, bootstrap: dict[str, Any] | None, fake: bool = False) -> str | None:
    """Why ``bootstrap`` does not fit a server in ``mode``, or ``None``.

    A decode server needs all three fields, unless it runs the ``fake`` backend (``fake``), which pairs with
    no prefill server; a prefill server needs the room (a request without any is served here from prompt to
    end, as by a colocated server); a colocated server takes none."""
    if bootstrap is None:
        if fake:
            return None
        return f"a decode server needs bootstrap_host, bootstrap_port and bootstrap_room ({ROUTER_HINT})" if mode == "decode" else None
    if mode == "null":
        return "bootstrap_host, bootstrap_port and bootstrap_room are for disaggregated servers; this one runs with --disaggregation-mode null"
    room = bootstrap.get("room")
    if not isinstance(room, int) or isinstance(room, bool) or not 0 <= room < 2**63:
        return f"bootstrap_room must be an integer in [0, 2**63), got {room!r}"
    if mode == "decode":
        host, port = bootstrap.get("host"), bootstrap.get("port")
        if not isinstance(host, str) or not host or not isinstance(port, int) or not 1 <= port <= 65535:
            return f"a decode server needs bootstrap_host and bootstrap_port of the prefill server ({ROUTER_HINT})"
    return None
