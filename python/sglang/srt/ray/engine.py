"""``RayEngine`` and the rank group that starts scheduler ranks as Ray actors."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from sglang.srt.entrypoints.engine import Engine

if TYPE_CHECKING:
    from sglang.srt.entrypoints.ranks import PortArgs
    from sglang.srt.ray.placement import Placement
    from sglang.srt.server_args import ServerArgs

logger = logging.getLogger(__name__)

STOP_WAIT_S = 5.0  # how long a stop waits for killed actors to be gone before removing their placement group


def _brief(exc: BaseException) -> str:
    """The exception's message on one line, at most 600 characters (Ray's are long)."""
    text = str(exc).strip() or type(exc).__name__
    return " ".join(text.split())[:600]


class RayRanks:
    """Every (replica, TP rank) of the engine as a :class:`SchedulerActor` in one placement group.

    Replica ``d``'s rank 0 binds its request socket on its own node (TCP) and its
    node's address is the replica's torch.distributed store; results go to the
    detokenizer on the launcher's node. ``dead`` reports the first actor whose
    ``serve`` call ended (killed, OOM, node lost) within one watchdog tick.
    """

    def __init__(self, ray: Any, connected_here: bool) -> None:
        self.ray, self.connected_here = ray, connected_here
        self.actors: list[Any] = []
        self.names: list[str] = []
        self.nodes: list[dict[str, Any]] = []
        self.starting: dict[Any, int] = {}  # start() ref -> actor index
        self.serving: dict[Any, int] = {}  # serve() ref -> actor index
        self.placement: Placement | None = None
        self.specs: list[tuple[int, int]] = []  # (dp_rank, tp_rank) of each actor

    def launch(self, server_args: ServerArgs, port_args: PortArgs) -> None:
        """Place the group, create the actors, start every rank (reports arrive through ``poll``)."""
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from sglang.srt.managers.scheduler_process import rank_name
        from sglang.srt.platforms import current_platform
        from sglang.srt.ray.actor import SchedulerActor
        from sglang.srt.ray.placement import cpus_per_rank, place

        ray = self.ray
        self.specs = specs = [(dp, tp) for dp in range(server_args.dp_size) for tp in range(server_args.tp_size)]
        bundle = current_platform.get_ray_bundle(cpus_per_rank(ray, len(specs)))
        self.placement = place(ray, bundle, len(specs), server_args.nnodes)
        remote = ray.remote(SchedulerActor)
        for i, (dp, tp) in enumerate(specs):
            own = self.placement.bundles[i]  # the actor asks for its whole bundle (a reused group's may differ from `bundle`)
            extra = {k: v for k, v in own.items() if k not in ("CPU", "GPU", "memory", "object_store_memory")}
            strategy = PlacementGroupSchedulingStrategy(self.placement.group, placement_group_bundle_index=self.placement.order[i])
            actor = remote.options(num_cpus=own.get("CPU", 0), num_gpus=own.get("GPU", 0), resources=extra or None,
                                   scheduling_strategy=strategy, max_restarts=0).remote(server_args.log_level, rank_name(tp, dp))
            self.actors.append(actor)
            self.names.append(rank_name(tp, dp))
        self.nodes = ray.get([a.node.remote() for a in self.actors])
        for i, (dp, tp) in enumerate(specs):
            lead = self.nodes[dp * server_args.tp_size]  # the replica's rank 0
            view = port_args.replica(dp, f"tcp://{lead['ip']}:{lead['port']}", f"tcp://{self.nodes[i]['ip']}:0")
            threads = max(1, int(self.placement.bundles[i].get("CPU", 1)))
            self.starting[self.actors[i].start.remote(server_args, view, 0, tp, dp, threads)] = i
        logger.info("Ray: %d scheduler actors placed on nodes %s", len(specs), [n["node_id"][:8] for n in self.nodes])

    def actor(self, i: int) -> str:
        n = self.nodes[i] if i < len(self.nodes) else {}
        return f"Ray actor {n.get('actor_id', '?')[:12]} on node {n.get('ip', '?')} {n.get('node_id', '?')[:8]}"

    def where(self, i: int) -> str:
        return f"scheduler {self.names[i]} ({self.actor(i)})"

    def pending(self) -> int:
        return len(self.starting)

    def poll(self, timeout: float) -> list[dict[str, Any]]:
        if not self.starting:
            return []
        done, _ = self.ray.wait(list(self.starting), num_returns=len(self.starting), timeout=timeout)
        out = []
        for ref in done:
            i = self.starting.pop(ref)
            try:
                msg = self.ray.get(ref)
            except Exception as exc:  # the actor died while starting
                dp, tp = self.specs[i]
                msg = {"status": "error", "rank": tp, "dp_rank": dp, "error": f"{self.where(i)} died: {_brief(exc)}"}
            if msg.get("status") == "ready":
                msg = {**msg, "process": f"{msg['process']} in {self.actor(i)}", "node_id": self.nodes[i]["node_id"]}
                self.serving[self.actors[i].serve.remote()] = i
            out.append(msg)
        return out

    def dead(self) -> str | None:
        if not self.serving:
            return None
        done, _ = self.ray.wait(list(self.serving), num_returns=1, timeout=0)
        if not done:
            return None
        # a killed rank takes its peers down with it (their collectives break and they exit with code 1), and
        # Ray may report a peer first: wait briefly for the others and name the root cause, not a symptom
        done, _ = self.ray.wait(list(self.serving), num_returns=len(self.serving), timeout=1.0)
        deaths = []
        for ref in done:
            try:
                self.ray.get(ref)
                cause = "its event loop returned"
            except Exception as exc:
                cause = _brief(exc)
            deaths.append((self.serving[ref], cause))
        i, cause = min(deaths, key=lambda d: "exit code 1" in d[1])
        return f"{self.where(i)} died: {cause}"

    def stop(self) -> None:
        """Kill every actor, remove the placement group created here, leave the cluster."""
        from ray.util.placement_group import remove_placement_group

        for actor in self.actors:
            try:
                self.ray.kill(actor, no_restart=True)
            except Exception:  # already gone
                pass
        # ray.kill does not wait: removing the group at once makes the raylet SIGTERM a still-live worker
        # (a SystemExit traceback in its log). Wait for the actors' calls to end first, briefly.
        pending = [*self.starting, *self.serving]
        if pending:
            try:
                self.ray.wait(pending, num_returns=len(pending), timeout=STOP_WAIT_S)
            except Exception:  # the cluster is going away anyway
                pass
        self.starting, self.serving = {}, {}
        self.actors = []
        if self.placement is not None and self.placement.created:
            try:
                remove_placement_group(self.placement.group)
            except Exception as exc:
                logger.warning("could not remove the Ray placement group: %s", exc)
            self.placement = None
        if self.connected_here and self.ray.is_initialized():
            self.ray.shutdown()
            self.connected_here = False


class RayEngine(Engine):
    """An ``Engine`` whose scheduler ranks are Ray actors (``--use-ray``); everything else is the same."""

    def _detokenizer_input(self) -> str | None:
        """Join the cluster first: the detokenizer listens on this node's Ray address, which ranks on
        other machines reach."""
        from sglang.srt.ray.cluster import connect
        from sglang.utils.process import free_port

        ray, connected = connect(self.server_args.ray_address)
        self.ray_ranks = RayRanks(ray, connected)
        self.groups.append(self.ray_ranks)  # stopped at shutdown whatever fails from here on
        ip = ray.util.get_node_ip_address()
        return f"tcp://{ip}:{free_port(ip)}"

    def _start_scheduler_ranks(self, server_args: ServerArgs, port_args: Any) -> None:
        self.ray_ranks.launch(server_args, port_args)
