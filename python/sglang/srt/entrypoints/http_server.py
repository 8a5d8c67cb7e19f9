"""The HTTP server: OpenAI-compatible API plus the native routes (FastAPI + uvicorn).

``launch_server(server_args)`` starts the engine, logs the platform decision,
the plugins and hooks, and the resolved configuration, then serves until
SIGINT/SIGTERM (children stopped within seconds) or until a child process dies
(the server exits non-zero with the cause in the log).
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse

from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest, CompletionRequest, GenerateRequest
from sglang.srt.entrypoints.openai.serving import ModelNotFound, OpenAIServing
from sglang.srt.managers.metrics import render_metrics
from sglang.srt.managers.tokenizer_manager import EngineDeadError, RequestError
from sglang.srt.utils.graceful_server import graceful_server_class
from sglang.srt.utils.http_common import error, install_common

logger = logging.getLogger(__name__)


def _sse(stream: Any) -> StreamingResponse:
    return StreamingResponse(stream, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


def build_app(engine: Any, server_args: Any) -> FastAPI:
    """The ASGI app over ``engine``. Reads its own ``server_args`` (a per-instance boundary)."""
    name = server_args.served_model_name or server_args.model_path
    serving = OpenAIServing(engine, name)
    app = FastAPI(title="sglang", docs_url=None, redoc_url=None)
    tm = engine.tokenizer_manager

    install_common(app, server_args.api_key)

    @app.exception_handler(RequestError)
    async def request_error(request: Request, exc: RequestError) -> JSONResponse:
        return error(400, str(exc))

    @app.exception_handler(ModelNotFound)
    async def model_not_found(request: Request, exc: ModelNotFound) -> JSONResponse:
        return error(404, str(exc), param="model", code="model_not_found")

    @app.exception_handler(EngineDeadError)
    async def engine_dead(request: Request, exc: EngineDeadError) -> JSONResponse:
        return error(503, str(exc), "server_error")

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200 if tm.dead is None else 503)

    @app.get("/health_generate")
    async def health_generate() -> Response:
        st = engine.open_request(input_ids=[tm.tokenizer.bos_token_id or 1], sampling_params={"max_new_tokens": 1})
        async for _ in engine.stream_request(st):
            pass
        return Response(status_code=200)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": name, "object": "model", "created": int(time.time()), "owned_by": "sglang",
                                            "max_model_len": serving.context}]}

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest) -> Any:
        out = await serving.completion(req)
        return out if isinstance(out, dict) else _sse(out)

    @app.post("/v1/chat/completions")
    async def chat(req: ChatCompletionRequest) -> Any:
        out = await serving.chat(req)
        return out if isinstance(out, dict) else _sse(out)

    @app.post("/generate")
    async def generate(req: GenerateRequest) -> Any:
        if (req.text is None) == (req.input_ids is None):
            raise RequestError("pass exactly one of 'text' or 'input_ids'")
        st = engine.open_request(req.text, req.sampling_params, req.input_ids)
        if req.stream:
            async def events() -> Any:
                async for c in engine.stream_request(st):
                    yield "data: " + json.dumps({"text": c["text"], "output_ids": c["output_ids"], "meta_info": c["meta_info"]}) + "\n\n"
                yield "data: [DONE]\n\n"

            return _sse(events())
        async for _ in engine.stream_request(st):
            pass
        return engine.result(st)

    @app.get("/get_server_info")
    async def server_info() -> dict[str, Any]:
        from sglang.srt.arg_groups.dump import resolved_with_provenance
        from sglang.srt.platforms import get_platform_decision
        from sglang.srt.plugins import plugin_records
        from sglang.srt.plugins.hook_registry import HookRegistry

        return {
            "server_args": resolved_with_provenance(server_args),
            "runtime": engine.get_server_info(),
            "platform": get_platform_decision().as_dict(),
            "plugins": [r.as_dict() for r in plugin_records()],
            "hooks": {t: [{"type": e.type.name, "hook": e.hook, "plugin": e.plugin, "dist": e.dist} for e in HookRegistry.describe(t)]
                      for t in HookRegistry.applied_targets()},
        }

    @app.post("/flush_cache")
    async def flush_cache() -> Response:
        engine.flush_cache()
        return PlainTextResponse("Cache flushed.\n")

    @app.get("/metrics")
    async def metrics() -> Response:
        s = tm.stats
        gauges = {"num_running_reqs": s.num_running if s else 0, "num_queue_reqs": s.num_waiting if s else 0,
                  "token_usage": round(s.kv_used_pages / s.kv_total_pages, 4) if s else 0.0,
                  "cached_pages": s.cached_pages if s else 0}
        return PlainTextResponse(render_metrics(dict(tm.counters), gauges, [tm.ttft, tm.itl]), media_type="text/plain; version=0.0.4")

    return app


def _log_startup(server_args: Any) -> None:
    from sglang.srt.arg_groups.dump import format_dump
    from sglang.srt.platforms import get_platform_decision
    from sglang.srt.plugins import format_plugin_report
    from sglang.srt.plugins.hook_registry import HookRegistry

    logger.info("SRT %s", get_platform_decision().format())
    logger.info("%s", format_plugin_report())
    for t in HookRegistry.applied_targets():
        logger.info("hook chain %s: %s", t, " -> ".join(f"{e.type.name}:{e.hook} [{e.plugin}]" for e in HookRegistry.describe(t)))
    logger.info("resolved configuration:\n%s", format_dump(server_args))


def launch_server(server_args: Any) -> int:
    """Serve until interrupted; returns the process exit status."""
    import uvicorn

    from sglang.srt.entrypoints.engine import Engine

    logging.basicConfig(level=getattr(logging, server_args.log_level.upper()), format="[%(asctime)s] %(levelname)s %(name)s: %(message)s", force=True)
    engine = Engine(server_args=server_args)
    _log_startup(server_args)
    app = build_app(engine, server_args)
    config = uvicorn.Config(app, host=server_args.host, port=server_args.port, log_level="warning", timeout_graceful_shutdown=3)
    server = graceful_server_class()(config)
    status = {"code": 0}

    def watch() -> None:
        while not server.should_exit:
            if engine.tokenizer_manager is not None and engine.tokenizer_manager.dead is not None:
                logger.error("shutting down: %s", engine.tokenizer_manager.dead)
                status["code"] = 1
                server.should_exit = True
                return
            time.sleep(0.2)

    threading.Thread(target=watch, daemon=True, name="sglang-server-watch").start()
    url = f"http://{server_args.host}:{server_args.port}"
    auth = f" -H 'Authorization: Bearer {server_args.api_key}'" if server_args.api_key else ""
    print(
        f"sglang is serving {server_args.served_model_name or server_args.model_path} at {url}\n"
        f"  try: curl {url}/v1/chat/completions{auth} -H 'Content-Type: application/json' "
        "-d '{\"messages\": [{\"role\": \"user\", \"content\": \"Hello!\"}], \"max_tokens\": 32}'",
        flush=True,
    )
    try:
        server.run()
    finally:
        engine.shutdown()
    return status["code"]


def main(argv: list[str] | None = None) -> None:
    from sglang.srt.server_args import prepare_server_args

    sys.exit(launch_server(prepare_server_args(sys.argv[1:] if argv is None else argv)))
