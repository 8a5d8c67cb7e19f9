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
TIMEOUT_ENV = "SGLANG_RAY_PLACEMENT_TIMEOUT"
READY_TIMEOUT_S = float(os.environ.get(TIMEOUT_ENV, "60"))


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
        nodes = node_totals(ray)
        short = shortfall([dict(bundle) for _ in range(ranks)], strategy, nodes)
        if short and not may_grow(ray):
            raise PlacementError(
                f"the Ray cluster cannot place {ranks} scheduler ranks of {bundle} each ({strategy}): {short}. Its nodes: "
                f"{[{k: v for k, v in n.items() if k in bundle} for n in nodes]}, in all {ray.cluster_resources()}, and it "
                f"cannot grow (no autoscaler). Lower --tp-size / --dp-size, or point --ray-address at a larger cluster "
                f"(set {TIMEOUT_ENV} to wait for nodes that join by hand)")
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


def node_totals(ray: Any) -> list[dict[str, float]]:
    """Each live node's total resources (not what is free now: other jobs may release theirs)."""
    return [dict(n.get("Resources") or {}) for n in ray.nodes() if n.get("Alive")]


def shortfall(bundles: list[dict[str, float]], strategy: str, nodes: list[dict[str, float]]) -> str | None:
    """Why ``bundles`` can never be placed on ``nodes`` as they are, or ``None`` when they might be.

    ``STRICT_PACK``: one node must hold them all (exact). ``SPREAD``: every bundle must fit some node and
    their sum the cluster (necessary conditions only: a packing that passes them may still wait)."""
    need: dict[str, float] = {}
    for b in bundles:
        for k, v in b.items():
            need[k] = need.get(k, 0.0) + v
    if strategy == "STRICT_PACK":
        if any(all(n.get(k, 0.0) >= v for k, v in need.items()) for n in nodes):
            return None
        return f"one node must hold {need} and none does"
    for b in bundles:
        if not any(all(n.get(k, 0.0) >= v for k, v in b.items()) for n in nodes):
            return f"no node holds a bundle of {b}"
    for k, v in need.items():
        have = sum(n.get(k, 0.0) for n in nodes)
        if have < v:
            return f"they need {v:g} {k} in all and the cluster has {have:g}"
    return None


def may_grow(ray: Any) -> bool:
    """Whether nodes may still join: ``SGLANG_RAY_PLACEMENT_TIMEOUT`` set (the operator chose to wait), or an
    autoscaler that reports a cluster config in which a node group can grow. A local cluster or one started by
    ``ray start`` reports none; its resources are all there is."""
    if os.environ.get(TIMEOUT_ENV):
        return True
    try:
        from ray._private.state import state

        config = state.get_cluster_config()
    except Exception:  # a Ray without this call: keep the old behaviour, wait
        return True
    if config is None:
        return False
    for group in getattr(config, "node_group_configs", []) or []:
        if group.max_count == -1 or group.max_count > group.min_count:
            return True
    return False
