"""The lingering close of a refused body, on a real uvicorn socket: every client reads the error, and a
hostile client cannot hold the connection longer or feed it more than the bounds."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
import uvicorn
from fastapi import FastAPI

from sglang.utils.http_common import install_common
from sglang.utils.process import free_port

KEY = "sk-linger"
LIMIT = 64 << 10
BIG = 12 << 20  # larger than any loopback socket buffer: without the drain the close resets the connection


class Served:
    def __init__(self, drain_bytes: int, drain_seconds: float) -> None:
        app = FastAPI()
        install_common(app, KEY, LIMIT, drain_bytes=drain_bytes, drain_seconds=drain_seconds)

        @app.post("/generate")
        async def generate(body: dict) -> dict:
            return {"ok": True}

        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="error"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    s = Served(drain_bytes=64 << 20, drain_seconds=10)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def strict() -> Iterator[Served]:
    """Small bounds, so the test sees them hold: 1 MiB, 0.5 s."""
    s = Served(drain_bytes=1 << 20, drain_seconds=0.5)
    yield s
    s.stop()


def _error(status: int, raw: bytes) -> dict:
    err = json.loads(raw)["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"], raw
    return err


def _urllib(port: int, body: bytes, key: str = KEY) -> tuple[int, bytes]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/generate", data=body,
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _raw(port: int, head: str) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(head.encode())
    return s


def _read_until_closed(s: socket.socket) -> tuple[bytes, float]:
    t0, got = time.monotonic(), b""
    try:
        while chunk := s.recv(65536):
            got += chunk
    except ConnectionResetError:
        pass
    return got, time.monotonic() - t0


def test_urllib_reads_the_413_of_a_declared_12_mb_body_and_the_401_of_one_without_a_key(served):
    body = json.dumps({"text": "a" * BIG}).encode()
    for _ in range(2):
        status, raw = _urllib(served.port, body)
        assert status == 413 and _error(413, raw)["code"] == "request_too_large"
    status, raw = _urllib(served.port, body, key="wrong")
    assert status == 401 and _error(401, raw)["code"] == "invalid_api_key"
    assert _urllib(served.port, json.dumps({"text": "hi"}).encode()) == (200, b'{"ok":true}')


def test_a_chunked_body_cut_off_at_the_limit_gets_its_413_read(served):
    conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=30)
    chunks = (b"a" * 65536 for _ in range(BIG // 65536))
    conn.request("POST", "/generate", chunks, {"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"}, encode_chunked=True)
    r = conn.getresponse()
    assert r.status == 413 and _error(413, r.read())["code"] == "request_too_large"
    assert r.getheader("connection") == "close"
    conn.close()


def test_a_refusal_without_a_body_keeps_the_connection_alive(served):
    conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=10)
    conn.request("GET", "/v1/models")
    r = conn.getresponse()
    assert r.status == 401 and r.getheader("connection") is None
    r.read()
    conn.request("POST", "/generate", json.dumps({"text": "hi"}), {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
    assert conn.getresponse().status == 200
    conn.close()


def test_a_client_that_stops_sending_is_closed_after_the_time_bound(strict):
    s = _raw(strict.port, f"POST /generate HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\nContent-Length: {LIMIT + 100}\r\n\r\nabc")
    got, seconds = _read_until_closed(s)
    s.close()
    assert got.startswith(b"HTTP/1.1 413") and b"request_too_large" in got
    assert 0.4 < seconds < 3, seconds


def test_a_declared_length_past_the_byte_bound_is_answered_and_closed_at_once(strict):
    s = _raw(strict.port, f"POST /generate HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\nContent-Length: {100 << 20}\r\n\r\n")
    got, seconds = _read_until_closed(s)
    s.close()
    assert got.startswith(b"HTTP/1.1 413") and seconds < 0.4, seconds


def test_expect_100_continue_gets_the_413_without_a_go_ahead_and_no_wait(served):
    s = _raw(served.port, f"POST /generate HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\nContent-Length: {BIG}\r\n"
                          "Expect: 100-continue\r\n\r\n")
    got, seconds = _read_until_closed(s)
    s.close()
    assert got.startswith(b"HTTP/1.1 413") and b"100 Continue" not in got and seconds < 2, (got[:80], seconds)


def test_an_endless_chunked_body_is_cut_off_after_the_byte_bound(strict):
    s = _raw(strict.port, f"POST /generate HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk = b"10000\r\n" + b"a" * 0x10000 + b"\r\n"
    sent, t0 = 0, time.monotonic()
    with pytest.raises(OSError):  # the server closes: a reset or a broken pipe, never an endless read
        while time.monotonic() - t0 < 20:
            s.sendall(chunk)
            sent += len(chunk)
    s.close()
    # LIMIT counted, 1 MiB drained, the rest is what the two sockets' buffers held
    assert time.monotonic() - t0 < 5 and sent < 64 << 20, (sent, time.monotonic() - t0)
