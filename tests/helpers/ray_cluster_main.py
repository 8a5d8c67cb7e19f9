"""A Ray cluster of several nodes on this machine, every one on 127.0.0.1 (run as a script by
``ray_cluster.RayCluster``): ``ray.cluster_utils.Cluster``, Ray's own way to run several raylets
on one host. Prints the GCS address, serves until its stdin closes, then stops every node.

``state ADDRESS`` instead prints, as JSON, the actors alive and the placement groups not removed.
"""

from __future__ import annotations

import json
import os
import sys

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # keep 127.0.0.1: never the machine's own address


def serve(nodes: int, cpus: int) -> None:
    from ray.cluster_utils import Cluster

    head = {"node_ip_address": "127.0.0.1", "num_cpus": cpus, "include_dashboard": False, "resources": {"node0": 1}}
    cluster = Cluster(initialize_head=True, head_node_args=head)
    for i in range(1, nodes):
        cluster.add_node(node_ip_address="127.0.0.1", num_cpus=cpus, resources={f"node{i}": 1})
    print(cluster.address, flush=True)
    sys.stdin.read()
    cluster.shutdown()


def state(address: str) -> None:
    import ray
    from ray._private import state as ray_state

    ray.init(address=address, log_to_driver=False)
    me = ray.get_runtime_context().get_job_id()
    actors = [a for a in ray_state.actors().values() if a["State"] != "DEAD" and a.get("JobID") != me]
    groups = [g for g in ray.util.placement_group_table().values() if g["state"] != "REMOVED"]
    print(json.dumps({"actors": [a.get("ActorClassName", "?") for a in actors], "placement_groups": [g.get("name") for g in groups]}))


if __name__ == "__main__":
    if sys.argv[1] == "state":
        state(sys.argv[2])
    else:
        serve(int(sys.argv[1]), int(sys.argv[2]))
