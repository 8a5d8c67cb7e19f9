"""The placement group of ``--use-ray``: one bundle per scheduler rank.

Bundles come from the platform (``current_platform.get_ray_bundle(cpus)``:
``{"CPU": n}`` on a CPU, ``{"GPU": 1, "CPU": n}`` on a GPU, a vendor's own
resource elsewhere). One node packs them (``STRICT_PACK``); ``--nnodes > 1``
spreads them (``SPREAD``). ``SGLANG_RAY_PLACEMENT_GROUP=NAME`` reuses a group
the operator reserved under that name instead of creating one.
"""

from __future__ import annotations

import logging
import os
import uuid
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

PLACEMENT_GROUP_ENV = "SGLANG_RAY_PLACEMENT_GROUP"
READY_TIMEOUT_S = float(os.environ.get("SGLANG_RAY_PLACEMENT_TIMEOUT", "60"))


class PlacementError(RuntimeError):
    pass


@dataclass
class Placement:
    group: Any
    created: bool  # removed at shutdown only when created here
    order: list[int]  # bundle index of each rank, in launch order: the driver's node first
    bundles: list[dict[str, float]]  # the resources of each rank's bundle (a reused group's own), in launch order


def cpus_per_rank(ray: Any, ranks: int) -> int:
    """The cluster's CPUs shared evenly among the ranks (at least 1 each)."""
    return max(1, int(ray.cluster_resources().get("CPU", 1)) // ranks)


def place(ray: Any, bundle: dict[str, float], ranks: int, nnodes: int) -> Placement:
    """Create (or reuse) the group and wait until it is placed; raises :class:`PlacementError` naming
    what the cluster lacks."""
    from ray.util.placement_group import get_placement_group, placement_group, placement_group_table

    name = os.environ.get(PLACEMENT_GROUP_ENV)
    if name:
        try:
            group, created = get_placement_group(name), False
        except ValueError as exc:
            raise PlacementError(f"{PLACEMENT_GROUP_ENV}={name}: no such placement group in the Ray cluster") from exc
    else:
        strategy = "SPREAD" if nnodes > 1 else "STRICT_PACK"
        group, created = placement_group([dict(bundle) for _ in range(ranks)], strategy=strategy, name=f"sglang-{uuid.uuid4().hex[:8]}"), True
    ready, _ = ray.wait([group.ready()], timeout=READY_TIMEOUT_S)
    if not ready:
        if created:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(group)
        raise PlacementError(
            f"the Ray cluster cannot place {ranks} scheduler ranks of {bundle} each within {READY_TIMEOUT_S:.0f}s "
            f"(cluster resources: {ray.cluster_resources()}); add nodes, or lower --tp-size / --dp-size"
        )
    table = placement_group_table(group)
    nodes = table["bundles_to_node_id"]
    if len(nodes) < ranks:
        raise PlacementError(f"{PLACEMENT_GROUP_ENV}={name} has {len(nodes)} bundles; {ranks} scheduler ranks need one each")
    here = ray.get_runtime_context().get_node_id()
    order = interleave(nodes, here)[:ranks]
    if nodes[order[0]] != here:
        logger.warning("no bundle of the placement group is on this node (%s): rank 0 runs on node %s; requests reach it "
                       "over TCP. Give this node CPUs in the Ray cluster to keep rank 0 beside the server", here[:8], nodes[order[0]][:8])
    return Placement(group, created, order, [dict(table["bundles"][i]) for i in order])


def interleave(bundle_nodes: dict[int, str], first_node: str) -> list[int]:
    """Bundle indices taking one bundle per node in turn, ``first_node`` (the launcher's) first: rank 0 of
    each replica lands on the launcher's node when it has a bundle, and a replica's TP ranks on distinct nodes
    when there are enough (``--nnodes``)."""
    by_node: dict[str, list[int]] = {}
    for i in sorted(bundle_nodes):
        by_node.setdefault(bundle_nodes[i], []).append(i)
    queues = sorted(by_node.items(), key=lambda kv: (kv[0] != first_node, kv[1][0]))
    order: list[int] = []
    while any(q for _, q in queues):
        order += [q.pop(0) for _, q in queues if q]
    return order
