"""Faults against a real server: a raising plugin hook, killed and stopped children, signals under load."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from helpers.dists import clean_env, make_dist
from helpers.server import ServerProc, alive, by_role

pytestmark = pytest.mark.e2e

POISON = 48_000  # a token id no English prompt here contains: the plugin's hook raises when it meets it

POISON_PLUGIN = f'''
from sglang.srt.plugins.hook_registry import HookRegistry, HookType


def _inspect(worker, batch):
    if any({POISON} in toks for toks in batch.new_tokens):
        raise ValueError("poisoned prompt")


def register():
    HookRegistry.register("sglang.srt.managers.tp_worker.TpModelWorker.forward_batch_generation", _inspect, HookType.BEFORE)
'''

IDLE_PLUGIN = '''
from sglang.srt.plugins.hook_registry import HookRegistry, HookType


def _broken(result, scheduler):
    raise RuntimeError("the idle hook is broken")


def register():
    HookRegistry.register("sglang.srt.managers.scheduler.Scheduler.get_next_batch_to_run", _broken, HookType.AFTER)
'''


def _post(url: str, path: str, body: dict, timeout: float = 120) -> tuple[int, str]:
    req = urllib.request.Request(url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _stream(url: str, body: dict, out: list, started: threading.Event | None = None) -> None:
    req = urllib.request.Request(url + "/v1/completions", json.dumps({**body, "stream": True}).encode(), {"Content-Type": "application/json"})
    events = []
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            for line in r:
                line = line.decode().strip()
                if line.startswith("data: "):
                    events.append(line[6:])
                    if started is not None:
                        started.set()
    except Exception as exc:  # a connection cut without an event is what the test must rule out
        events.append(f"EXCEPTION {type(exc).__name__}: {exc}")
    out.append(events)


@pytest.fixture(scope="module")
def poisoned(tmp_path_factory):
    site = tmp_path_factory.mktemp("site")
    make_dist(site, "acme-poison", version="2.1", entry_points={"sglang.srt.plugins": {"poison": "acme_poison:register"}},
              files={"acme_poison/__init__.py": POISON_PLUGIN})
    s = ServerProc(["--max-total-tokens", "8192", "--log-level", "info"], tmp_path_factory.mktemp("poison") / "log.txt",
                   env={"PYTHONPATH": str(site)})
    yield s
    s.stop()


def test_a_hook_raising_for_one_prompt_fails_only_that_request(poisoned):
    url = poisoned.url
    good = {"prompt": "Name three colors.", "max_tokens": 24, "temperature": 0}
    solo = json.loads(_post(url, "/v1/completions", good)[1])["choices"][0]["text"]

    def ask(i: int) -> tuple[int, str]:
        if i == 3:
            return _post(url, "/generate", {"input_ids": [1, 2, POISON, 5], "sampling_params": {"max_new_tokens": 4}})
        return _post(url, "/v1/completions", good)

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(ask, range(8)))
    bad_status, bad_text = results[3]
    assert bad_status == 500, bad_text
    message = json.loads(bad_text)["error"]["message"]
    assert "poisoned prompt" in message and "plugin poison" in message and "acme-poison" in message
    assert "TpModelWorker.forward_batch_generation" in message
    for i, (status, text) in enumerate(results):
        if i != 3:
            assert status == 200 and json.loads(text)["choices"][0]["text"] == solo
    info = json.loads(urllib.request.urlopen(url + "/get_server_info", timeout=30).read())
    deadline = time.monotonic() + 5
    while not info["hook_failures"] and time.monotonic() < deadline:  # the scheduler reports its counts every 0.5 s
        time.sleep(0.5)
        info = json.loads(urllib.request.urlopen(url + "/get_server_info", timeout=30).read())
    [failure] = info["hook_failures"]
    assert failure["plugin"] == "poison" and failure["dist"] == "acme-poison" and failure["count"] >= 1 and failure["process"] == "scheduler"
    doctor = subprocess.run([str(Path(sys.executable).parent / "sglang"), "plugins", "doctor", "--url", url], capture_output=True, text=True,
                            env=clean_env(), timeout=120)
    assert f"server {url}: hook failures since start:" in doctor.stdout, doctor.stdout + doctor.stderr
    assert "_inspect on sglang.srt.managers.tp_worker.TpModelWorker.forward_batch_generation [plugin poison, acme-poison] in the scheduler" in doctor.stdout


def test_a_stopped_and_continued_detokenizer_delays_but_loses_nothing(poisoned):
    _, detok = by_role(poisoned)
    body = {"prompt": "Count to ten.", "max_tokens": 16, "temperature": 0}
    want = json.loads(_post(poisoned.url, "/v1/completions", body)[1])["choices"][0]["text"]
    os.kill(detok, signal.SIGSTOP)
    try:
        with ThreadPoolExecutor(6) as pool:
            futures = [pool.submit(_post, poisoned.url, "/v1/completions", body) for _ in range(6)]
            time.sleep(2.0)
            assert not any(f.done() for f in futures)  # the text waits in the detokenizer's socket
            os.kill(detok, signal.SIGCONT)
            results = [f.result(60) for f in futures]
    finally:
        os.kill(detok, signal.SIGCONT)
    assert all(status == 200 and json.loads(text)["choices"][0]["text"] == want for status, text in results)


def test_sigterm_under_load_answers_in_flight_requests_and_exits_zero(poisoned):
    kids = poisoned.children()
    long = {"prompt": "Tell me a long story.", "max_tokens": 2000, "ignore_eos": True}
    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(_post, poisoned.url, "/v1/completions", long) for _ in range(4)]
        time.sleep(2.0)  # all four are generating
        t0 = time.monotonic()
        poisoned.proc.send_signal(signal.SIGTERM)
        results = [f.result(30) for f in futures]
        code = poisoned.proc.wait(15)
    assert code == 0 and time.monotonic() - t0 < 10
    for status, text in results:
        assert status == 503 and "shutting down" in json.loads(text)["error"]["message"], text
    time.sleep(0.5)
    assert not any(alive(k) for k in kids)


def test_sigkill_of_the_scheduler_sends_every_stream_an_error_event(tmp_path):
    s = ServerProc(["--max-total-tokens", "16384"], tmp_path / "log.txt")
    try:
        sched, detok = by_role(s)
        kids = s.children()
        out: list = []
        started = [threading.Event() for _ in range(20)]
        threads = [threading.Thread(target=_stream, args=(s.url, {"prompt": f"Story {i}:", "max_tokens": 1500, "ignore_eos": True}, out, started[i]))
                   for i in range(20)]
        for t in threads:
            t.start()
        for e in started:
            assert e.wait(60)
        os.kill(sched, signal.SIGKILL)
        for t in threads:
            t.join(60)
        code = s.proc.wait(20)
    finally:
        s.stop()
    assert code != 0
    assert len(out) == 20
    for events in out:
        assert events[-1] == "[DONE]", events[-3:]
        err = json.loads(events[-2])["error"]
        assert err["type"] == "server_error" and "exited with code -9" in err["message"]
    time.sleep(0.5)
    assert not any(alive(k) for k in kids)


def test_a_hook_failing_on_every_idle_loop_stops_the_engine_with_its_plugin_named(tmp_path):
    site = tmp_path / "site"
    make_dist(site, "acme-idle", entry_points={"sglang.srt.plugins": {"idle": "acme_idle:register"}}, files={"acme_idle/__init__.py": IDLE_PLUGIN})
    s = None
    try:
        s = ServerProc(["--max-total-tokens", "2048"], tmp_path / "log.txt", env={"PYTHONPATH": str(site), "SGLANG_SCHEDULER_MAX_FAILURES": "5"})
    except RuntimeError as exc:  # it may already be gone before /health answered: that is fine, the cause is what matters
        log = str(exc)
    else:
        code = s.proc.wait(60)
        log = s.text()
        assert code == 1
    finally:
        if s is not None:
            s.stop()
    assert "5 consecutive failures of Scheduler.get_next_batch_to_run" in log
    assert "the idle hook is broken" in log and "plugin idle" in log and "acme-idle" in log
    stop = log.index("shutting down")
    assert "sglang is serving" not in log[stop:]  # no banner after the shutdown message
