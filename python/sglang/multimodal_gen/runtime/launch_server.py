"""The diffusion HTTP server: OpenAI images API over the scheduler (FastAPI + uvicorn).

Runs in the HTTP child, imported only after that child registered and applied
diffusion hooks. Routes: ``POST /v1/images/generations`` (base64 PNG),
``GET /v1/models``, ``GET /health``, ``GET /get_server_info``.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr

from sglang.multimodal_gen.runtime.entrypoints.client import RequestFailedError, SchedulerClient, SchedulerDiedError
from sglang.multimodal_gen.runtime.pipelines.sampling_params import SamplingParams, SamplingParamsError
from sglang.utils.http_common import error, install_common

if TYPE_CHECKING:
    from sglang.multimodal_gen.runtime.server_args import ServerArgs

logger = logging.getLogger(__name__)


class ImageGenerationRequest(BaseModel):
    """OpenAI ``images.generate`` body plus the sglang extensions ``seed``,
    ``num_inference_steps`` and ``guidance_scale``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    prompt: StrictStr = Field(max_length=4096)
    model: StrictStr | None = None
    n: StrictInt = 1  # ranges: SamplingParams.validate, the one place that decides them
    size: StrictStr | None = Field(None, max_length=16)
    response_format: StrictStr | None = "b64_json"
    seed: StrictInt | None = None
    num_inference_steps: StrictInt | None = None
    guidance_scale: StrictFloat | None = Field(None, allow_inf_nan=False)
    user: StrictStr | None = None


def _parse_size(size: str | None) -> int | None:
    if size is None or size == "auto":
        return None
    w, sep, h = size.lower().partition("x")
    if not sep or not w.isdigit() or w != h:
        raise SamplingParamsError("size", f"must be 'NxN' (square, N a multiple of the native size), got {size!r}")
    return int(w)


def build_app(client: SchedulerClient, server_args: ServerArgs, info: dict[str, Any]) -> FastAPI:
    app = FastAPI(title="sglang diffusion", docs_url=None, redoc_url=None)
    name = server_args.served_model_name or server_args.model_path

    install_common(app, server_args.api_key, host=server_args.host)

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200 if client.alive else 503)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": name, "object": "model", "created": int(time.time()), "owned_by": "sglang"}]}

    @app.get("/get_server_info")
    async def server_info() -> dict[str, Any]:
        return {"runtime": "diffusion", "model": name, **info}

    @app.post("/v1/images/generations")
    async def generate(req: ImageGenerationRequest) -> Any:
        if req.model is not None and req.model != name:
            return error(404, f"model {req.model!r} is not served here; this server serves {name!r}", param="model", code="model_not_found")
        if req.response_format not in (None, "b64_json"):
            return error(400, f"response_format {req.response_format!r} is not supported: this server returns base64 PNGs ('b64_json')", param="response_format")
        try:
            size = _parse_size(req.size)
            params = SamplingParams(req.prompt, req.n, req.num_inference_steps, req.guidance_scale, req.seed, size)
            outputs = await client.agenerate(params)  # the worker validates; a bad field comes back naming it
        except SamplingParamsError as exc:
            return error(400, str(exc), param=exc.param)
        except SchedulerDiedError as exc:
            return error(503, str(exc), "server_error")
        except RequestFailedError as exc:
            return error(500, str(exc), "server_error")
        data = [{"b64_json": o.to_b64_png(), "revised_prompt": o.prompt, "seed": o.seed} for o in outputs]
        return {"created": int(time.time()), "data": data}

    return app


def launch_http_server(server_args: ServerArgs, conn: Any, launcher_manifest: dict[str, Any] | None = None) -> None:
    """Entry of the HTTP child: wait for the scheduler, then serve until told to stop.

    The schedulers' handshake arrives here; their manifests are compared with
    the launcher's.
    """
    import uvicorn

    from sglang.multimodal_gen.runtime.managers.launcher import check_scheduler_manifests, wait_ready
    from sglang.utils.graceful_server import graceful_server_class

    info = wait_ready(None, conn)
    if launcher_manifest is not None:
        check_scheduler_manifests(info, launcher_manifest)
    client = SchedulerClient(conn)
    server = graceful_server_class()(
        uvicorn.Config(build_app(client, server_args, info), host=server_args.host, port=server_args.port, log_level="warning", timeout_graceful_shutdown=3)
    )

    def watch() -> None:
        while not server.should_exit:
            if not client.alive:
                logger.error("shutting down: the diffusion scheduler is gone")
                server.should_exit = True
                return
            time.sleep(0.2)

    threading.Thread(target=watch, daemon=True, name="diffusion-http-watch").start()
    url = f"http://{server_args.host}:{server_args.port}"
    print(
        f"sglang diffusion is serving {server_args.served_model_name} at {url}\n"
        f"  try: curl {url}/v1/images/generations -H 'Content-Type: application/json' "
        "-d '{\"prompt\": \"a handwritten digit 7\", \"size\": \"64x64\"}'",
        flush=True,
    )
    server.run()
    client.close()
