"""``--use-ray`` on a Ray cluster of two nodes this test starts on 127.0.0.1 (two logical CPUs each): one
server with TP 2 spread over the nodes and two data-parallel replicas, then a killed actor; and
``sglang.Engine(use_ray=True)`` on a local cluster it starts itself. The tiny TP-2 model (helpers.scale_out)
keeps four actors within seconds on two cores."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from helpers.ray_cluster import ENV, RayCluster
from helpers.scale_out import GREEDY, PROMPT_IDS, SMALL, greedy_ids, many_requests, post, server_info
from helpers.server import ServerProc

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.model]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = RayCluster(2, 2, tmp_path_factory.mktemp("ray") / "cluster.txt")
    yield c
    c.stop()


@pytest.fixture(scope="module")
def ray_server(cluster, tmp_path_factory, tiny_tp_model):
    # the cluster is named by RAY_ADDRESS (the --ray-address flag takes precedence when given)
    flags = ["--model-path", str(tiny_tp_model), "--use-ray", "--tp-size", "2", "--nnodes", "2", "--dp-size", "2", *SMALL]
    s = ServerProc([*flags, "--log-level", "info"],
                   tmp_path_factory.mktemp("ray-srv") / "log.txt", env={**ENV, "RAY_ADDRESS": cluster.address}, timeout=300)
    yield s
    s.stop()


def test_ray_places_each_replicas_tp_ranks_on_both_nodes_and_matches_tp1(ray_server, cluster, tiny_tp1_ids):
    ranks = server_info(ray_server.url)["runtime"]["ranks"]
    assert [(r["dp_rank"], r["rank"]) for r in ranks] == [(d, t) for d in range(2) for t in range(2)]
    for dp in range(2):
        assert len({r["node_id"] for r in ranks if r["dp_rank"] == dp}) == 2, ranks  # one rank per node
    assert all("Ray actor" in r["process"] for r in ranks)
    state = cluster.state()
    assert state["actors"].count("SchedulerActor") == 4 and len(state["placement_groups"]) == 1
    assert greedy_ids(ray_server.url) == tiny_tp1_ids


def test_ray_two_replicas_serve_64_requests(ray_server):
    results = many_requests(ray_server.url)
    assert len(results) == 64
    states = server_info(ray_server.url)["internal_states"]
    assert len(states) == 2 and all(s["routed_requests"] > 0 for s in states)


def test_a_killed_actor_fails_the_requests_and_the_server_exits_naming_it_leaving_nothing(ray_server, cluster):
    victim = next(r for r in server_info(ray_server.url)["runtime"]["ranks"] if (r["dp_rank"], r["rank"]) == (0, 1))

    def long_request(i: int):
        try:  # up to the tiny model's context (512): seconds of decoding on two cores
            return post(ray_server.url, "/generate", {"text": f"Story {i}:", "sampling_params": {"max_new_tokens": 480, "ignore_eos": True}})
        except OSError as exc:  # the server went away mid-response: an error too
            return 599, str(exc)

    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(long_request, i) for i in range(8)]
        time.sleep(0.5)
        killed = time.monotonic()
        os.kill(victim["pid"], signal.SIGKILL)
        results = [f.result(timeout=60) for f in futures]
    assert all(status >= 500 for status, _ in results), results
    ray_server.proc.wait(timeout=max(1, 10 - (time.monotonic() - killed)))
    assert ray_server.proc.returncode != 0
    log = ray_server.text()
    shutdown = next(line for line in log.splitlines() if "shutting down:" in line)
    assert "scheduler TP1 (Ray actor" in shutdown and "died" in shutdown, shutdown  # the killed actor, not a survivor's symptom
    assert cluster.state() == {"actors": [], "placement_groups": []}


ENGINE_SCRIPT = '''
import json
import os
import sys
import time

import sglang
from sglang.srt.managers.request_errors import EngineDeadError


def main():
    out = {}
    try:  # no cluster named: a local one; a rank that fails to start: its traceback reaches the caller
        sglang.Engine(use_ray=True, model_path=sys.argv[1], attention_backend="bogus", log_level="error", max_total_tokens=2048)
    except EngineDeadError as exc:
        out["error"] = str(exc)
    import ray
    from ray.util.placement_group import placement_group, placement_group_table

    out["connected_after_failure"] = ray.is_initialized()
    # an application that is already a Ray driver, with a placement group it reserved by name
    ray.init(address="local", _node_ip_address="127.0.0.1", include_dashboard=False, num_cpus=2)
    reserved = placement_group([{"CPU": 1}], name="reserved-for-sglang")
    ray.get(reserved.ready())
    os.environ["SGLANG_RAY_PLACEMENT_GROUP"] = "reserved-for-sglang"
    print("=== normal close: begin", file=sys.stderr, flush=True)
    with sglang.Engine(use_ray=True, model_path=sys.argv[1], dtype="float32", log_level="error", max_total_tokens=2048) as engine:
        out["type"] = type(engine).__name__
        out["node"] = engine.get_server_info()["ranks"][0]["node_id"]
        out["ids"] = [r["output_ids"] for r in engine.generate(input_ids=json.loads(sys.argv[2]), sampling_params=json.loads(sys.argv[3]))]
    time.sleep(1.0)  # the actors' forwarded output reaches this driver's stderr
    print("=== normal close: end", file=sys.stderr, flush=True)
    out["connected_after_shutdown"] = ray.is_initialized()
    out["reserved_state"] = placement_group_table(reserved)["state"]
    # a cluster of 2 CPUs that cannot grow: 4 ranks of 1 CPU each are refused at once, not after the timeout
    del os.environ["SGLANG_RAY_PLACEMENT_GROUP"]
    t0 = time.monotonic()
    try:
        sglang.Engine(use_ray=True, model_path=sys.argv[1], tp_size=2, dp_size=2, log_level="error", max_total_tokens=2048)
    except Exception as exc:
        out["too_small"] = str(exc)
    out["too_small_s"] = time.monotonic() - t0
    print(json.dumps(out))


if __name__ == "__main__":
    main()
'''


def test_engine_use_ray_starts_a_local_cluster_reports_a_failed_rank_and_reuses_a_reserved_group(tmp_path, tiny_tp_model, tiny_tp1_ids):
    script = tmp_path / "ray_engine.py"
    script.write_text(ENGINE_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", *ENV)}  # no cluster named: a local one on 127.0.0.1
    proc = subprocess.run([sys.executable, str(script), str(tiny_tp_model), json.dumps(PROMPT_IDS), json.dumps(GREEDY)], capture_output=True, text=True, timeout=300, env={**env, "SGLANG_QUIET_LOAD": "1"})
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "scheduler TP0 failed to start" in out["error"] and "unknown attention backend 'bogus'" in out["error"], out["error"]
    assert "Traceback" in out["error"] and not out["connected_after_failure"]  # the failed start left the cluster it started
    assert out["type"] == "RayEngine" and out["node"]
    assert out["connected_after_shutdown"] and out["reserved_state"] == "CREATED"  # the caller's connection and group are left alone
    assert out["ids"] == tiny_tp1_ids
    closing = proc.stderr.split("=== normal close: begin")[1].split("=== normal close: end")[0]
    assert "Traceback" not in closing and "SystemExit" not in closing, closing[-3000:]
    assert out["too_small_s"] < 5, out
    assert "cannot place 4 scheduler ranks" in out["too_small"] and "cannot grow" in out["too_small"], out["too_small"]
    assert "'CPU': 2.0" in out["too_small"] and "--tp-size" in out["too_small"], out["too_small"]  # found, and the fix
