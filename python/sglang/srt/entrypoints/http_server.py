"""The HTTP server: OpenAI-compatible API plus the native routes (FastAPI + uvicorn).

``launch_server(server_args)`` starts the engine, logs the platform decision,
the plugins and hooks, and the resolved configuration, then serves until
SIGINT/SIGTERM (children stopped within seconds) or until a child process dies
(the server exits non-zero with the cause in the log).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import threading
import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse

from sglang.srt.entrypoints.native_api import install_native_routes
from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest, CompletionRequest
from sglang.srt.entrypoints.openai.serving import ModelNotFound, OpenAIServing
from sglang.srt.managers.metrics import CONTENT_TYPE
from sglang.srt.managers.request_errors import EngineDeadError, RequestError, RequestFailedError, ServerShutdown
from sglang.utils.graceful_server import graceful_server_class
from sglang.utils.http_common import error, install_common
from sglang.utils.openapi import SSE

if TYPE_CHECKING:
    from sglang.srt.server_args import ServerArgs

logger = logging.getLogger(__name__)

CLIENT_GONE = 499  # the status logged for a client that disconnected before its answer (nginx's convention)


def _sse(stream: Any) -> StreamingResponse:
    return StreamingResponse(stream, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


async def unless_disconnected(request: Request, work: Awaitable[Any]) -> Any:
    """Await ``work``; if the client disconnects first, cancel it (its requests are aborted) and
    return a bare 499 response nobody reads.

    The body has been read by now, so the next ASGI message is ``http.disconnect``: a listener waits
    for it (as Starlette's streaming responses do) instead of polling ``request.is_disconnected()``,
    whose cancelled receive could miss a disconnect that arrived while it ran."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        if not gone.done():
            gone.cancel()
    if task.done():
        return task.result()
    task.cancel()
    with contextlib.suppress(BaseException):
        await task
    return Response(status_code=CLIENT_GONE)


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass  # a body's stray empty chunk; the disconnect is what ends the wait


def build_app(engine: Any, server_args: ServerArgs) -> FastAPI:
    """The ASGI app over ``engine``. Reads its own ``server_args`` (a per-instance boundary)."""
    name = server_args.served_model_name or server_args.model_path
    serving = OpenAIServing(engine, name)
    app = FastAPI(title="sglang", docs_url=None, redoc_url=None)
    tm = engine.tokenizer_manager
    routes: set[str] = set()

    def count(path: str, status: int) -> None:
        tm.metrics.count_error(path if path in routes else "unmatched", "validation" if status < 500 else "engine")

    install_common(app, server_args.api_key, server_args.max_request_bytes, server_args.host, server_args.allowed_hosts, on_error=count)

    @app.exception_handler(RequestError)
    async def request_error(request: Request, exc: RequestError) -> JSONResponse:
        count(request.url.path, 400)
        return error(400, str(exc), param=exc.param)

    @app.exception_handler(ModelNotFound)
    async def model_not_found(request: Request, exc: ModelNotFound) -> JSONResponse:
        count(request.url.path, 404)
        return error(404, str(exc), param="model", code="model_not_found")

    @app.exception_handler(RequestFailedError)
    async def request_failed(request: Request, exc: RequestFailedError) -> JSONResponse:
        count(request.url.path, 500)
        return error(500, str(exc), "server_error", code="engine_error")

    @app.exception_handler(EngineDeadError)
    async def engine_dead(request: Request, exc: EngineDeadError) -> JSONResponse:
        count(request.url.path, 503)
        return error(503, str(exc), "server_error", code="shutting_down" if isinstance(exc, ServerShutdown) else "engine_dead")

    @app.get("/health", response_class=PlainTextResponse)
    async def health() -> Response:
        if tm.dead is not None:
            return error(503, f"the engine is dead: {tm.dead}", "server_error", code="engine_dead")
        return PlainTextResponse("")

    @app.get("/health_generate", response_class=PlainTextResponse)
    async def health_generate() -> Response:
        st = await engine.aopen_request(input_ids=[tm.tokenizer.bos_token_id or 1], sampling_params={"max_new_tokens": 1})
        await engine.wait_request(st)
        return PlainTextResponse("")

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        now = int(time.time())
        base = {"id": name, "object": "model", "created": now, "owned_by": "sglang", "root": name, "parent": None,
                "max_model_len": serving.context}
        adapters = [{"id": r.lora_name, "object": "model", "created": now, "owned_by": "sglang", "root": r.lora_path, "parent": name,
                     "max_model_len": serving.context} for r in (tm.lora.models() if tm.lora is not None else [])]
        return {"object": "list", "data": [base, *adapters]}

    @app.post("/v1/completions", responses={200: {"content": SSE}})
    async def completions(req: CompletionRequest, request: Request) -> Any:
        out = await unless_disconnected(request, serving.completion(req))
        return out if isinstance(out, (dict, Response)) else _sse(out)

    @app.post("/v1/chat/completions", responses={200: {"content": SSE}})
    async def chat(req: ChatCompletionRequest, request: Request) -> Any:
        out = await unless_disconnected(request, serving.chat(req))
        return out if isinstance(out, (dict, Response)) else _sse(out)

    install_native_routes(app, engine, server_args, count, unless_disconnected)

    @app.post("/flush_cache", response_class=PlainTextResponse)
    async def flush_cache() -> Response:
        engine.flush_cache()
        return PlainTextResponse("Cache flushed.\n")

    @app.get("/metrics", response_class=PlainTextResponse)
    async def metrics() -> Response:
        return Response(tm.metrics.render(), media_type=CONTENT_TYPE)

    routes.update(getattr(r, "path", "") for r in app.routes)
    return app


def _log_startup(server_args: ServerArgs) -> None:
    from sglang.srt.arg_groups.dump import format_dump
    from sglang.srt.platforms import get_platform_decision
    from sglang.srt.plugins import format_plugin_report
    from sglang.srt.plugins.hook_registry import HookRegistry

    logger.info("SRT %s", get_platform_decision().format())
    logger.info("%s", format_plugin_report())
    for t in HookRegistry.applied_targets():
        logger.info("hook chain %s: %s", t, " -> ".join(f"{e.type.name}:{e.hook} [{e.plugin}]" for e in HookRegistry.describe(t)))
    logger.info("resolved configuration:\n%s", format_dump(server_args))


def launch_server(server_args: ServerArgs) -> int:
    """Serve until interrupted; returns the process exit status."""
    import uvicorn

    from sglang.srt.entrypoints.engine import Engine

    logging.basicConfig(level=getattr(logging, server_args.log_level.upper()), format="[%(asctime)s] %(levelname)s %(name)s: %(message)s", force=True)
    engine = Engine(server_args=server_args)
    if server_args.node_rank != 0:  # this node hosts scheduler ranks only; node 0 serves HTTP
        logger.info("node %d of %d is up: it serves scheduler ranks only (HTTP is on node 0)", server_args.node_rank, server_args.nnodes)
        try:
            logger.error("shutting down: %s", engine.wait())
        except KeyboardInterrupt:
            return 0
        finally:
            engine.shutdown()
        return 1
    _log_startup(server_args)
    from sglang.srt.managers.cpu_binding import bind_front

    bind_front(server_args, "the HTTP server")  # after the engine's children started: they do not inherit it
    app = build_app(engine, server_args)
    tm = engine.tokenizer_manager
    config = uvicorn.Config(app, host=server_args.host, port=server_args.port, log_level="warning", timeout_graceful_shutdown=3)
    status = {"code": 0}

    def stopping() -> None:  # SIGTERM/SIGINT: answer every in-flight request now, with an error body
        def end_all() -> None:  # off the signal handler: the interrupted main thread may hold the manager's lock
            logger.info("shutting down: ending %d pending requests", len(tm.states))
            tm.fail_all(ServerShutdown("the server is shutting down; retry against another replica or after it restarts"))

        threading.Thread(target=end_all, daemon=True, name="sglang-shutdown").start()

    def banner(_: Any) -> None:
        url = f"http://{server_args.host}:{server_args.port}"
        auth = " -H 'Authorization: Bearer <your --api-key>'" if server_args.api_key else ""
        print(
            f"sglang is serving {server_args.served_model_name or server_args.model_path} at {url}\n"
            f"  try: curl {url}/v1/chat/completions{auth} -H 'Content-Type: application/json' "
            "-d '{\"messages\": [{\"role\": \"user\", \"content\": \"Hello!\"}], \"max_tokens\": 32}'",
            flush=True,
        )

    def started(srv: Any) -> None:  # inside the loop, once the socket listens
        tm.serve_on_loop(asyncio.get_running_loop())  # results read on this loop: one wake a streamed token fewer
        banner(srv)

    server = graceful_server_class(on_signal=stopping, on_started=started)(config)

    def watch() -> None:
        while not server.should_exit:
            dead = tm.dead
            if dead is not None and not isinstance(dead, ServerShutdown):
                logger.error("shutting down: %s", dead)
                status["code"] = 1
                server.should_exit = True
                return
            time.sleep(0.2)

    threading.Thread(target=watch, daemon=True, name="sglang-server-watch").start()
    try:
        server.run()
    finally:
        engine.shutdown()
    return status["code"]


def main(argv: list[str] | None = None) -> None:
    from sglang.srt.server_args import prepare_server_args

    sys.exit(launch_server(prepare_server_args(sys.argv[1:] if argv is None else argv)))
