"""Scale-out without Ray on one machine: ``--dp-size`` replicas behind one server, and ``--nnodes``
launchers that serve one tensor-parallel engine together (the tiny TP-2 model, see helpers.scale_out)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.error
from pathlib import Path

import openai
import pytest

from helpers.scale_out import SMALL, get, greedy_ids, many_requests, post, server_info
from helpers.server import ServerProc
from sglang.utils.process import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.model]


@pytest.fixture(scope="module")
def dp_server(tmp_path_factory, tiny_tp_model):
    s = ServerProc(["--model-path", str(tiny_tp_model), "--dp-size", "2", "--load-balance-method", "cache_aware", *SMALL, "--log-level", "warning"],
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
    for i in range(5):
        client.completions.create(model="default", prompt=prefix + f"Question {i}: what is {i} plus {i}?", max_tokens=4, temperature=0)
    status, body = post(dp_server.url, "/generate", {"text": prefix + "Question 9: and nine?", "sampling_params": {"max_new_tokens": 4}})
    after = [s["routed_requests"] for s in server_info(dp_server.url)["internal_states"]]
    delta = [a - b for a, b in zip(after, before)]
    assert sorted(delta) == [0, 6], delta  # every request found the prefix on the replica the first one went to
    assert status == 200 and body["meta_info"]["cached_tokens"] >= 128, body  # and that replica's prefix cache held it


def test_dp_greedy_answers_match_one_rank(dp_server, tiny_tp1_ids):
    assert greedy_ids(dp_server.url) == tiny_tp1_ids


def test_multinode_without_ray_two_launchers_serve_tp2_with_tp1_outputs(tmp_path, tiny_tp_model, tiny_tp1_ids):
    dist = f"127.0.0.1:{free_port()}"
    ports = [free_port(), free_port()]
    flags = ["--model-path", str(tiny_tp_model), "--tp-size", "2", "--nnodes", "2", "--dist-init-addr", dist, *SMALL, "--log-level", "warning"]
    commands = [[sys.executable, "-m", "sglang.launch_server"], [str(Path(sys.executable).parent / "sglang"), "serve"]]  # both entry points
    logs = [open(tmp_path / f"node{r}.txt", "w") for r in range(2)]
    procs = [subprocess.Popen([*commands[r], *flags, "--node-rank", str(r), "--port", str(ports[r])], stdout=logs[r], stderr=subprocess.STDOUT,
                              env={**os.environ, "SGLANG_QUIET_LOAD": "1"}) for r in range(2)]
    url = f"http://127.0.0.1:{ports[0]}"
    try:
        deadline = time.monotonic() + 180
        while True:
            assert all(p.poll() is None for p in procs), [(tmp_path / f"node{r}.txt").read_text()[-3000:] for r in range(2)]
            try:
                if get(url, "/health")[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "node0.txt").read_text()[-3000:]
            time.sleep(0.3)
        assert greedy_ids(url) == tiny_tp1_ids
        with pytest.raises(urllib.error.URLError):  # node 1 hosts a scheduler rank only: no HTTP server
            get(f"http://127.0.0.1:{ports[1]}", "/health")
    finally:
        procs[0].terminate()
        procs[0].wait(30)
        try:
            assert procs[1].wait(30) != 0  # its peer is gone: node 1 stops too, non-zero
        finally:
            procs[1].kill()
            for f in logs:
                f.close()
