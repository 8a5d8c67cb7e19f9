"""Scale-out without Ray on one machine: ``--dp-size`` replicas behind one server, and ``--nnodes``
launchers that serve one tensor-parallel engine together."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import urllib.error

import openai
import pytest

from helpers.scale_out import GREEDY, PROMPTS, engine_texts, get, greedy_texts, many_requests, post, server_info
from helpers.server import ServerProc
from sglang.utils.process import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.model]


@pytest.fixture(scope="module")
def dp_server(tmp_path_factory):
    s = ServerProc(["--dp-size", "2", "--load-balance-method", "cache_aware", "--dtype", "float32", "--log-level", "warning"],
                   tmp_path_factory.mktemp("dp") / "log.txt")
    yield s
    s.stop()


def test_dp_two_replicas_serve_64_requests_and_each_reports_its_state(dp_server):
    results = many_requests(dp_server.url)
    assert len(results) == 64 and all(r["meta_info"]["completion_tokens"] == 8 for r in results)
    states = server_info(dp_server.url)["internal_states"]
    assert [s["dp_rank"] for s in states] == [0, 1]
    assert sum(s["routed_requests"] for s in states) == 64
    assert all(s["routed_requests"] > 0 for s in states)  # 64 distinct prompts: both replicas served
    metrics = get(dp_server.url, "/metrics")[1]
    assert re.search(r'^sglang_num_running_reqs\{dp_rank="0"\} ', metrics, re.M)
    assert re.search(r'^sglang_num_running_reqs\{dp_rank="1"\} ', metrics, re.M)


def test_dp_cache_aware_sends_a_shared_prefix_to_one_replica(dp_server):
    before = [s["routed_requests"] for s in server_info(dp_server.url)["internal_states"]]
    prefix = "You are a careful assistant who answers in one short sentence. " * 12
    client = openai.OpenAI(base_url=dp_server.url + "/v1", api_key="none", max_retries=0, timeout=120)
    for i in range(6):
        client.completions.create(model="default", prompt=prefix + f"Question {i}: what is {i} plus {i}?", max_tokens=4, temperature=0)
    after = [s["routed_requests"] for s in server_info(dp_server.url)["internal_states"]]
    delta = [a - b for a, b in zip(after, before)]
    assert sorted(delta) == [0, 6], delta  # every request found the prefix on the replica the first one went to


def test_dp_greedy_answers_match_one_engine(dp_server, engine):
    assert greedy_texts(dp_server.url) == engine_texts(engine)


def _launcher(node_rank: int, port: int, dist: str, log) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "sglang.launch_server", "--tp-size", "3", "--nnodes", "3", "--node-rank", str(node_rank),
           "--dist-init-addr", dist, "--port", str(port), "--dtype", "float32", "--log-level", "warning"]
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={"SGLANG_QUIET_LOAD": "1", **__import__("os").environ})


def test_multinode_without_ray_three_launchers_serve_tp3_with_tp1_outputs(tmp_path, engine):
    dist = f"127.0.0.1:{free_port()}"
    ports = [free_port() for _ in range(3)]
    logs = [open(tmp_path / f"node{r}.txt", "w") for r in range(3)]
    procs = [_launcher(r, ports[r], dist, logs[r]) for r in range(3)]
    url = f"http://127.0.0.1:{ports[0]}"
    try:
        deadline = time.monotonic() + 240
        while True:
            assert all(p.poll() is None for p in procs), [(tmp_path / f"node{r}.txt").read_text()[-3000:] for r in range(3)]
            try:
                if get(url, "/health")[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "node0.txt").read_text()[-3000:]
            time.sleep(0.5)
        assert greedy_texts(url) == engine_texts(engine)
        for r in (1, 2):  # the other nodes host scheduler ranks only
            with pytest.raises(urllib.error.URLError):
                get(f"http://127.0.0.1:{ports[r]}", "/health")
        status, body = post(url, "/generate", {"text": PROMPTS[0], "sampling_params": GREEDY})
        assert status == 200 and body["meta_info"]["completion_tokens"] == GREEDY["max_new_tokens"]
    finally:
        procs[0].terminate()
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        for f in logs:
            f.close()
    assert all(p.returncode is not None for p in procs)
