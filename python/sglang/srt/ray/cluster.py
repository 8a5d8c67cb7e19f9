"""Joining the Ray cluster ``--use-ray`` runs on, or starting a local one."""

from __future__ import annotations

import os
from typing import Any

# Ray turns a loopback node address into the machine's network address unless this is "0"
# (its switch for single-machine clusters); a cluster on 127.0.0.1 must stay on 127.0.0.1.
LOOPBACK_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
NAMESPACE = "sglang"


class RayUnavailableError(RuntimeError):
    """``--use-ray`` without ray installed, or the cluster cannot be reached."""


def _is_loopback(address: str | None) -> bool:
    if not address:
        return True
    host = address.rsplit(":", 1)[0]
    return host in ("127.0.0.1", "localhost", "::1", "[::1]")


def import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise RayUnavailableError("--use-ray needs ray: pip install 'sglang[ray]' (or pip install ray)") from exc
    return ray


def connect(address: str | None) -> tuple[Any, bool]:
    """``ray`` connected to ``address`` (``--ray-address``, else ``RAY_ADDRESS``), or to a new local
    cluster on 127.0.0.1 (dashboard off) when there is none. Returns ray and whether this call connected
    (False: the process was already a Ray driver, which the engine then leaves connected)."""
    address = address or os.environ.get("RAY_ADDRESS") or None
    if _is_loopback(address):
        os.environ.setdefault(LOOPBACK_SWITCH, "0")
    ray = import_ray()
    if ray.is_initialized():
        return ray, False
    try:
        if address:
            ray.init(address=address, namespace=NAMESPACE, log_to_driver=True)
        else:
            ray.init(address="local", _node_ip_address="127.0.0.1", include_dashboard=False, namespace=NAMESPACE, num_cpus=os.cpu_count() or 1)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = f"the Ray cluster at {address}" if address else "a local Ray cluster"
        raise RayUnavailableError(f"--use-ray could not join {where}: {exc}; check --ray-address / RAY_ADDRESS") from exc
    return ray, True
