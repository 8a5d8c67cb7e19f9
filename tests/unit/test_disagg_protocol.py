"""Prefill/decode disaggregation without a model: flags, request fields, the wire formats, the bootstrap endpoint."""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request

import pytest

from sglang.srt.arg_groups.disagg import Timeouts, check_mooncake
from sglang.srt.arg_groups.errors import ServerArgsError
from sglang.srt.disaggregation.base import KVLayout, KVTransferError, page_runs
from sglang.srt.disaggregation.bootstrap_server import BootstrapServer
from sglang.srt.disaggregation.kv_manager import pack_first_token, unpack_first_token
from sglang.srt.disaggregation.mini_lb import parse_args
from sglang.srt.entrypoints.openai.protocol import CompletionRequest, GenerateRequest
from sglang.srt.managers.bootstrap_fields import check_bootstrap
from sglang.srt.runtime_context import reset_context
from sglang.srt.server_args import ServerArgs
from sglang.utils.process import free_port


@pytest.fixture(autouse=True)
def _clean_context():
    yield
    reset_context()


def test_decode_mode_resolves_without_a_prefix_cache():
    sa = ServerArgs(disaggregation_mode="decode")
    assert sa.disable_radix_cache and "disaggregation" in sa.provenance()["disable_radix_cache"]
    assert not ServerArgs(disaggregation_mode="prefill").disable_radix_cache
    assert not ServerArgs(disaggregation_mode="decode", disaggregation_decode_enable_radix_cache=True).disable_radix_cache


@pytest.mark.parametrize("fields, message", [
    ({"disaggregation_bootstrap_port": 9000}, r"--disaggregation-bootstrap-port take effect only with --disaggregation-mode"),
    ({"num_reserved_decode_tokens": 4}, r"--num-reserved-decode-tokens take effect only"),
    ({"disaggregation_mode": "decode", "tp_size": 2}, r"drop --tp-size .*not implemented"),
    ({"disaggregation_mode": "prefill", "dp_size": 2}, r"drop --dp-size"),
    ({"disaggregation_mode": "prefill", "disaggregation_transfer_backend": "fake"}, r"fake is for decode servers only"),
    ({"disaggregation_mode": "decode", "disaggregation_transfer_backend": "fake", "disaggregation_ib_device": "mlx5_0"},
     r"fake does not use"),
    ({"disaggregation_mode": "prefill", "disaggregation_decode_enable_radix_cache": True}, r"enable-radix-cache is for decode servers"),
    ({"disaggregation_mode": "decode", "disaggregation_decode_enable_radix_cache": True, "disable_radix_cache": True},
     r"--disable-radix-cache turns off"),
    ({"disaggregation_mode": "decode", "disaggregation_decode_enable_radix_cache": True, "disaggregation_transfer_backend": "fake"},
     r"fake never receives"),
    ({"disaggregation_mode": "decode", "disaggregation_transfer_backend": "mooncake_tcp", "disaggregation_ib_device": "mlx5_0"},
     r"ib-device names an RDMA device"),
    ({"disaggregation_mode": "prefill", "disaggregation_bootstrap_port": 30000}, r"differ from --port"),
    ({"disaggregation_mode": "prefill", "num_reserved_decode_tokens": -1}, r"must be >= 0"),
])
def test_disaggregation_flags_are_refused_with_the_reason(fields, message):
    with pytest.raises(ServerArgsError, match=message):
        ServerArgs(**fields).check_server_args()


def test_both_modes_pass_the_checks_with_mooncake_installed():
    for mode in ("prefill", "decode"):
        ServerArgs(disaggregation_mode=mode).check_server_args()


def test_the_fake_backend_is_registered_and_needs_no_mooncake(monkeypatch):
    from sglang.srt.arg_groups.disagg import TRANSFER_BACKENDS
    from sglang.srt.arg_groups.meta import field_arg, public_fields
    from sglang.srt.disaggregation.transfer import BACKENDS, FakeTransfer, create_transfer

    flag = next(f for f in public_fields(ServerArgs) if f.name == "disaggregation_transfer_backend")
    assert set(BACKENDS) == set(TRANSFER_BACKENDS) == set(field_arg(flag).choices)
    monkeypatch.setitem(sys.modules, "mooncake.engine", None)  # a machine without Mooncake still runs a fake decode server
    ServerArgs(disaggregation_mode="decode", disaggregation_transfer_backend="fake").check_server_args()
    fake = create_transfer("fake", "127.0.0.1", None)
    assert isinstance(fake, FakeTransfer) and not fake.moves_kv
    with pytest.raises(KVTransferError, match="fake moves no KV"):
        fake.write("peer", [0], [0], [8])


def test_a_fake_decode_server_takes_requests_without_bootstrap_fields():
    from sglang.srt.managers.bootstrap_fields import FAKE_BOOTSTRAP_HOST, fake_bootstrap

    assert check_bootstrap("decode", None, fake=True) is None and "bootstrap_host" in check_bootstrap("decode", None)
    a, b = fake_bootstrap(), fake_bootstrap()
    assert a["host"] == FAKE_BOOTSTRAP_HOST and check_bootstrap("decode", a) is None and a["room"] != b["room"]


def test_a_missing_mooncake_names_the_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "mooncake.engine", None)  # what an uninstalled module looks like to import
    with pytest.raises(ServerArgsError, match=r"pip install mooncake-transfer-engine-non-cuda"):
        check_mooncake()


def test_timeouts_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("SGLANG_DISAGGREGATION_WAITING_TIMEOUT", "7")
    assert Timeouts.from_env().waiting == 7 and Timeouts.from_env().bootstrap == 300
    monkeypatch.setenv("SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL", "soon")
    with pytest.raises(ServerArgsError, match="SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL"):
        Timeouts.from_env()


def test_bootstrap_fields_fit_the_mode():
    b = {"host": "10.0.0.1", "port": 8998, "room": 5}
    assert check_bootstrap("decode", b) is None and check_bootstrap("prefill", {"room": 5}) is None
    assert check_bootstrap("prefill", None) is None and check_bootstrap("null", None) is None
    assert "mini_lb" in check_bootstrap("decode", None)
    assert "--disaggregation-mode null" in check_bootstrap("null", b)
    assert "bootstrap_room" in check_bootstrap("decode", {**b, "room": True})
    assert "bootstrap_port" in check_bootstrap("decode", {**b, "port": None})


def test_bodies_give_each_request_its_room():
    g = GenerateRequest(text=["a", "b"], bootstrap_host="h", bootstrap_port=1, bootstrap_room=2**63 - 1)
    assert [g.bootstrap_for(i)["room"] for i in range(2)] == [2**63 - 1, 0]
    c = CompletionRequest(prompt="a", n=2, bootstrap_room=[4, 9])
    assert [c.bootstrap_for(i)["room"] for i in range(2)] == [4, 9]
    with pytest.raises(ValueError, match="bootstrap_room has 2 entries"):
        c.bootstrap_for(2)
    assert CompletionRequest(prompt="a").bootstrap_for(0) is None


def test_page_runs_coalesce_where_both_sides_are_consecutive():
    assert page_runs([3, 4, 5, 9, 10], [0, 1, 2, 3, 4]) == [(3, 0, 3), (9, 3, 2)]
    assert page_runs([1, 2], [7, 5]) == [(1, 7, 1), (2, 5, 1)]
    assert page_runs([], []) == []


def test_first_token_row_round_trips():
    assert unpack_first_token(pack_first_token(42, None)) == (42, None)
    info = (-0.5, [(42, -0.5), (7, -1.25)])
    assert unpack_first_token(pack_first_token(42, info)) == (42, info)


def test_layout_mismatch_names_what_differs():
    lay = KVLayout((1, 2), (64, 64), 1, "float32")
    assert lay.mismatch(lay.wire()) is None
    assert "page_size differs" in lay.mismatch({**lay.wire(), "page_size": 16})
    assert "dtype differs" in lay.mismatch({**lay.wire(), "dtype": "bfloat16"})


def test_bootstrap_endpoint_registers_and_answers():
    port = free_port()
    server = BootstrapServer("127.0.0.1", port)
    url = f"http://127.0.0.1:{port}"
    try:
        with urllib.request.urlopen(url + "/health", timeout=5) as r:
            assert r.status == 200
        with pytest.raises(urllib.error.HTTPError) as exc:
            urllib.request.urlopen(url + "/route", timeout=5)
        assert exc.value.code == 503
        exc.value.close()
        with pytest.raises(urllib.error.HTTPError) as exc:
            urllib.request.urlopen(urllib.request.Request(url + "/route", b"[1]", method="PUT"), timeout=5)
        assert exc.value.code == 400
        exc.value.close()
        route = {"endpoint": "tcp://127.0.0.1:1", "session": "127.0.0.1:2", "layout": {}}
        urllib.request.urlopen(urllib.request.Request(url + "/route", json.dumps(route).encode(), method="PUT"), timeout=5).close()
        with urllib.request.urlopen(url + "/route", timeout=5) as r:
            assert json.loads(r.read()) == route
        with pytest.raises(OSError, match="pick a free --disaggregation-bootstrap-port"):
            BootstrapServer("127.0.0.1", port)  # the port is taken
    finally:
        server.close()


def test_router_arguments_take_optional_bootstrap_ports():
    args = parse_args(["--prefill", "http://p1:30000", "9000", "--prefill", "http://p2:30000/", "--decode", "http://d:30001"])
    assert [(p.url, p.bootstrap_port, p.host) for p in args.prefills] == [("http://p1:30000", 9000, "p1"), ("http://p2:30000", 8998, "p2")]
    assert args.decodes == ["http://d:30001"]
    with pytest.raises(SystemExit):
        parse_args(["--prefill", "http://p1:30000", "x", "--decode", "http://d"])


@pytest.mark.parametrize("path", ["/generate", "/v1/chat/completions", "/abort_request"])
def test_the_router_answers_a_body_that_is_not_a_json_object_with_a_400_and_calls_no_server(path):
    from fastapi.testclient import TestClient

    from sglang.srt.disaggregation.mini_lb import Prefill, Router, build_app

    # servers on a port nothing listens on: a request that reached them would fail with a 5xx naming the side
    client = TestClient(build_app(Router([Prefill("http://127.0.0.1:9", 9)], ["http://127.0.0.1:9"])), raise_server_exceptions=False)
    for raw in (b"{not json", b"[1, 2]", b'"text"'):
        r = client.post(path, content=raw, headers={"Content-Type": "application/json"})
        assert r.status_code == 400 and r.json()["error"]["message"] == "the request body must be a JSON object", (raw, r.text)
