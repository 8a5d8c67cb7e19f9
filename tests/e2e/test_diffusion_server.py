"""``sglang serve`` on a diffusion model: the OpenAI images API, errors, auth, lifecycle."""

from __future__ import annotations

import base64
import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import openai
import pytest

from helpers.server import ServerProc, alive


def _decode_png(data: bytes) -> np.ndarray:
    """A PNG file's pixels, read by Pillow (the format check a client would make)."""
    import io

    from PIL import Image

    with Image.open(io.BytesIO(data)) as img:
        assert img.format == "PNG" and img.mode == "L"
        return np.asarray(img)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = ServerProc(["--model-path", "digits-dit"], tmp_path_factory.mktemp("dsrv") / "server.log")
    yield s
    s.stop()


def post(url: str, body: bytes | dict, headers: dict[str, str] | None = None) -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_openai_client_generates_base64_pngs(server):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused")
    res = client.images.generate(
        model="digits-dit", prompt="a handwritten digit 7", n=2, size="64x64", response_format="b64_json",
        extra_body={"seed": 3, "num_inference_steps": 10},
    )
    assert len(res.data) == 2
    pngs = [_decode_png(base64.b64decode(d.b64_json)) for d in res.data]
    assert all(p.shape == (64, 64) and p.dtype == np.uint8 for p in pngs)
    assert not np.array_equal(pngs[0], pngs[1])  # seeds 3 and 4
    again = client.images.generate(model="digits-dit", prompt="a handwritten digit 7", n=2, size="64x64", extra_body={"seed": 3, "num_inference_steps": 10})
    assert [d.b64_json for d in again.data] == [d.b64_json for d in res.data]


def test_models_route_lists_the_served_model(server):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused")
    assert [m.id for m in client.models.list().data] == ["digits-dit"]


@pytest.mark.parametrize(
    ("body", "status", "param", "text"),
    [
        ({"prompt": "3", "n": 0}, 400, "n", "must be an integer from 1 to 256, got 0"),
        ({"prompt": "3", "size": "10x12"}, 400, "size", "must be 'NxN'"),
        ({"prompt": "3", "size": "12x12"}, 400, "size", "multiple of the native 8 pixels"),
        ({"prompt": "3", "model": "dall-e-3"}, 404, "model", "model 'dall-e-3' is not served here"),
        ({"prompt": "3", "response_format": "url"}, 400, "response_format", "returns base64 PNGs"),
        ({"prompt": "a cat"}, 400, "prompt", "'a cat' names no digit"),
        ({"prompt": "3", "num_inference_steps": 5000}, 400, "num_inference_steps", "from 1 to 1000"),
        ({"n": 1}, 400, "prompt", "prompt: Field required"),
        ({"prompt": "3", "n": "many"}, 400, "n", "n: Input should be a valid integer"),
        # the work of one request is bounded, so the heaviest legal one delays others by a bounded time
        ({"prompt": "3", "n": 256, "num_inference_steps": 100}, 400, "num_inference_steps", "at most 6400 image-steps per request"),
        ({"prompt": "3", "n": 64, "size": "512x512"}, 400, "size", "output pixels per request"),
        ({"prompt": "3", "n": True}, 400, "n", "n: Input should be a valid integer"),
        ({"prompt": "3", "quality": "hd"}, 400, "quality", "unsupported field 'quality'"),
        ({"prompt": "3", "guidance_scale": 1e400}, 400, "guidance_scale", "finite"),
    ],
)
def test_bad_requests_get_openai_errors_and_the_server_keeps_serving(server, body, status, param, text):
    code, err = post(server.url + "/v1/images/generations", body)
    assert code == status and err["error"]["param"] == param and text in err["error"]["message"], err
    code, ok = post(server.url + "/v1/images/generations", {"prompt": "1", "num_inference_steps": 2})
    assert code == 200 and len(ok["data"]) == 1


def test_malformed_json_is_a_400(server):
    code, err = post(server.url + "/v1/images/generations", b"{not json")
    assert code == 400 and "JSON" in err["error"]["message"]


def test_server_info_reports_platform_and_worker(server):
    with urllib.request.urlopen(server.url + "/get_server_info", timeout=10) as r:
        info = json.loads(r.read())
    assert info["runtime"] == "diffusion" and info["decision"]["rule"].startswith("auto: no plugin active, built-in cpu")
    assert info["worker"]["distributed_backend"] == "gloo" and info["config"]["architecture"] == "DigitsDiT"


def test_api_key_and_sigterm_shutdown(tmp_path):
    s = ServerProc(["--model-path", "digits-dit", "--api-key", "sekrit"], tmp_path / "server.log")
    try:
        code, err = post(s.url + "/v1/images/generations", {"prompt": "2"})
        assert code == 401 and err["error"]["code"] == "invalid_api_key"
        code, ok = post(s.url + "/v1/images/generations", {"prompt": "2", "num_inference_steps": 2}, {"Authorization": "Bearer sekrit"})
        assert code == 200
        with urllib.request.urlopen(s.url + "/health", timeout=5) as r:
            assert r.status == 200
        children = s.children()
        assert len(children) >= 2
        t0 = time.monotonic()
        assert s.stop(signal.SIGTERM) == 0
        assert time.monotonic() - t0 < 15
        time.sleep(0.5)
        assert not [c for c in children if alive(c)]
    finally:
        s.stop()


def test_a_dead_scheduler_makes_the_server_exit_non_zero(tmp_path):
    s = ServerProc(["--model-path", "digits-dit"], tmp_path / "server.log")
    try:
        with urllib.request.urlopen(s.url + "/get_server_info", timeout=10) as r:
            scheduler_pid = json.loads(r.read())["pid"]
        assert scheduler_pid in s.children()
        subprocess.run(["kill", "-9", str(scheduler_pid)], check=True)
        assert s.proc.wait(20) == 1
        assert "process exited with code -9; shutting down" in s.text()
        time.sleep(0.5)
        assert not [c for c in s.children() if alive(c)]
    finally:
        s.stop()


def test_cli_generate_writes_pngs(tmp_path):
    exe = Path(sys.executable).parent / "sglang"
    proc = subprocess.run(
        [str(exe), "generate", "--prompt", "a handwritten digit 2", "--prompt", "nine", "--seed", "4", "--num-inference-steps", "6", "--size", "16", "--output-path", str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    files = sorted(p.name for p in tmp_path.glob("*.png"))
    assert files == ["000_2_4.png", "001_9_5.png"]
    assert _decode_png((tmp_path / files[0]).read_bytes()).shape == (16, 16)
    assert "prompt='nine' seed=5" in proc.stdout


def test_cli_generate_bad_prompt_is_a_clean_error(tmp_path):
    exe = Path(sys.executable).parent / "sglang"
    proc = subprocess.run([str(exe), "generate", "--prompt", "a dog", "--output-path", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "sglang generate: error: SamplingParamsError: prompt: 'a dog' names no digit" in proc.stderr
