"""A small router for prefill/decode disaggregation (upstream's ``mini_lb``).

``python -m sglang.srt.disaggregation.mini_lb --prefill URL [BOOTSTRAP_PORT] --decode URL [--host H --port P]``
(each flag repeated for several servers; they are picked round robin). Every generation request
(``/generate``, ``/v1/completions``, ``/v1/chat/completions``) gets ``bootstrap_host``, ``bootstrap_port`` and
a fresh random ``bootstrap_room`` and is sent to one prefill and one decode server at once; the client gets
the decode server's answer, streamed when it streams. A failure on either side ends the request with an
OpenAI error body whose message names the side and the server, and cancels the other side's request.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import logging
import random
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse

from sglang.utils.http_common import error, error_body

logger = logging.getLogger(__name__)

DEFAULT_BOOTSTRAP_PORT = 8998
GENERATION_ROUTES = ("/generate", "/v1/completions", "/v1/chat/completions")


@dataclass(frozen=True)
class Prefill:
    url: str
    bootstrap_port: int

    @property
    def host(self) -> str:
        return urlsplit(self.url).hostname or "127.0.0.1"


class SideError(Exception):
    """One side failed: the status and the error body the client gets."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(body["error"]["message"])
        self.status, self.body = status, body


def _side_error(side: str, url: str, status: int, payload: Any) -> SideError:
    """The client's error for a failed ``side`` answer: the server's own error message, prefixed with who said it."""
    detail = payload.get("error", {}).get("message") if isinstance(payload, dict) and isinstance(payload.get("error"), dict) else None
    message = f"{side} server {url}: {detail or str(payload)[:500]}"
    return SideError(status, error_body(status, message, "server_error" if status >= 500 else None))


class Router:
    """Round robin over prefill and decode servers; one shared HTTP client."""

    def __init__(self, prefills: list[Prefill], decodes: list[str], timeout_s: float | None = None) -> None:
        import httpx

        if not prefills or not decodes:
            raise ValueError("the router needs at least one --prefill and one --decode server")
        self.prefills, self.decodes = prefills, decodes
        self._p, self._d = itertools.cycle(prefills), itertools.cycle(decodes)
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(timeout_s, connect=5.0), limits=httpx.Limits(max_connections=1024))

    def pick(self) -> tuple[Prefill, str]:
        return next(self._p), next(self._d)

    async def _prefill(self, p: Prefill, path: str, body: dict[str, Any]) -> None:
        """Run the prefill side; raises :class:`SideError` naming it when it fails (its answer is not used)."""
        import httpx

        try:
            async with self.client.stream("POST", p.url + path, json=body) as r:
                data = await r.aread()
                if r.status_code >= 400:
                    raise _side_error("prefill", p.url, r.status_code, _json(data))
                if body.get("stream"):
                    for line in data.decode(errors="replace").splitlines():  # a stream ends with its error as an event
                        if line.startswith("data: {") and '"error"' in line:
                            raise _side_error("prefill", p.url, 500, _json(line[6:].encode()))
        except httpx.HTTPError as exc:
            raise _side_error("prefill", p.url, 502, f"unreachable or failed ({type(exc).__name__}: {exc})") from None

    async def forward(self, path: str, body: dict[str, Any]) -> Response:
        import httpx

        p, d = self.pick()
        body = {**body, "bootstrap_host": p.host, "bootstrap_port": p.bootstrap_port, "bootstrap_room": random.randint(0, 2**63 - 1)}
        prefill = asyncio.ensure_future(self._prefill(p, path, body))
        if body.get("stream"):
            return await self._stream(d, path, body, prefill)
        decode = asyncio.ensure_future(self.client.post(d + path, json=body))
        answered = False
        try:
            done, _ = await asyncio.wait({prefill, decode}, return_when=asyncio.FIRST_COMPLETED)
            if prefill in done and prefill.exception() is not None:
                raise prefill.exception()  # type: ignore[misc]
            try:
                r = await decode
            except httpx.HTTPError as exc:
                raise _side_error("decode", d, 502, f"unreachable or failed ({type(exc).__name__}: {exc})") from None
            if r.status_code >= 400:
                raise _side_error("decode", d, r.status_code, _json(r.content))
            answered = True  # the decode side has the KV: the prefill side's answer is due and not needed
            return Response(r.content, status_code=r.status_code, media_type=r.headers.get("content-type", "application/json"))
        except SideError as exc:
            return JSONResponse(exc.body, status_code=exc.status)
        finally:
            if not answered:  # a side that failed, or a client that left: the other side's request is aborted
                decode.cancel()
                prefill.cancel()
            _settle(prefill)

    async def _stream(self, d: str, path: str, body: dict[str, Any], prefill: asyncio.Future[None]) -> Response:
        import httpx

        req = self.client.build_request("POST", d + path, json=body)
        try:
            r = await self.client.send(req, stream=True)
        except httpx.HTTPError as exc:
            prefill.cancel()
            err = _side_error("decode", d, 502, f"unreachable or failed ({type(exc).__name__}: {exc})")
            return JSONResponse(err.body, status_code=err.status)
        if r.status_code >= 400:
            data = await r.aread()
            await r.aclose()
            prefill.cancel()
            err = _side_error("decode", d, r.status_code, _json(data))
            return JSONResponse(err.body, status_code=err.status)

        async def relay() -> AsyncIterator[bytes]:
            chunks = r.aiter_raw()
            relayed = False  # a chunk reached the client: the decode side has the KV, the prefill side is not needed
            try:
                while True:
                    nxt = asyncio.ensure_future(chunks.__anext__())
                    # once a chunk is relayed the prefill future is no longer awaited, so it is never in done
                    done, _ = await asyncio.wait({nxt} if relayed else {nxt, prefill}, return_when=asyncio.FIRST_COMPLETED)
                    if prefill in done and prefill.exception() is not None and nxt not in done:
                        nxt.cancel()
                        exc = prefill.exception()
                        body_ = exc.body if isinstance(exc, SideError) else error_body(502, f"prefill: {exc}", "server_error")
                        yield f"data: {json.dumps(body_)}\n\ndata: [DONE]\n\n".encode()
                        return
                    try:
                        chunk = await nxt
                    except StopAsyncIteration:
                        return
                    relayed = True
                    yield chunk
            except httpx.HTTPError as exc:
                err = _side_error("decode", d, 502, f"the stream broke ({type(exc).__name__}: {exc})")
                yield f"data: {json.dumps(err.body)}\n\ndata: [DONE]\n\n".encode()
            finally:  # the stream ended, failed, or its client left: neither side's request runs on
                await r.aclose()
                if not prefill.done():
                    prefill.cancel()
                _settle(prefill)

        return StreamingResponse(relay(), status_code=r.status_code, media_type=r.headers.get("content-type", "text/event-stream"))

    async def get_first(self, path: str) -> Response:
        import httpx

        try:
            r = await self.client.get(self.decodes[0] + path)
        except httpx.HTTPError as exc:
            return error(502, f"decode server {self.decodes[0]}: unreachable ({exc})", "server_error")
        return Response(r.content, status_code=r.status_code, media_type=r.headers.get("content-type"))

    async def fan_out(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        """Every server's answer to ``path``: ``{url: status or error text}``."""
        import httpx

        async def one(url: str) -> tuple[str, Any]:
            try:
                r = await self.client.request(method, url + path, json=body)
                return url, r.status_code
            except httpx.HTTPError as exc:
                return url, f"unreachable ({type(exc).__name__})"

        urls = [p.url for p in self.prefills] + self.decodes
        return dict(await asyncio.gather(*(one(u) for u in urls)))


def _json(data: bytes) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        return data.decode(errors="replace")[:500]


def _settle(fut: asyncio.Future[Any]) -> None:
    """Let a side's task finish in the background; its outcome was already used or no longer matters."""
    if fut.done():
        with contextlib.suppress(BaseException):
            fut.exception()
    else:
        fut.add_done_callback(lambda f: f.cancelled() or f.exception())


async def _json_object(request: Request) -> dict[str, Any] | Response:
    """The body as a JSON object, or the 400 that says it is not one."""
    try:
        body = json.loads(await request.body())
    except ValueError:
        return error(400, "the request body must be a JSON object")
    return body if isinstance(body, dict) else error(400, "the request body must be a JSON object")


def build_app(router: Router) -> FastAPI:
    app = FastAPI(title="sglang mini_lb", docs_url=None, redoc_url=None)

    async def generation(request: Request) -> Response:
        body = await _json_object(request)
        if isinstance(body, Response):
            return body
        return await router.forward(request.url.path, body)

    for path in GENERATION_ROUTES:
        app.add_api_route(path, generation, methods=["POST"])

    @app.get("/health", response_class=PlainTextResponse)
    async def health() -> Response:
        return PlainTextResponse("")

    @app.get("/v1/models")
    async def models() -> Response:
        return await router.get_first("/v1/models")

    @app.get("/get_model_info")
    async def model_info() -> Response:
        return await router.get_first("/get_model_info")

    @app.get("/get_server_info")
    async def server_info() -> dict[str, Any]:
        return {"prefill": [{"url": p.url, "bootstrap_port": p.bootstrap_port} for p in router.prefills],
                "decode": [{"url": d} for d in router.decodes]}

    @app.post("/flush_cache")
    async def flush_cache() -> dict[str, Any]:
        return await router.fan_out("POST", "/flush_cache")

    @app.post("/abort_request")
    async def abort_request(request: Request) -> Response:
        """Both sides ran the request under the ``rid`` its client chose: abort it on every server."""
        body = await _json_object(request)
        if isinstance(body, Response):
            return body
        await router.fan_out("POST", "/abort_request", body)
        return PlainTextResponse("")

    @app.get("/health_generate", response_class=PlainTextResponse)
    async def health_generate() -> Response:
        """One token through the next prefill/decode pair: 200, or that pair's error."""
        r = await router.forward("/generate", {"input_ids": [1], "sampling_params": {"max_new_tokens": 1}})
        return PlainTextResponse("") if r.status_code == 200 else r

    return app


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m sglang.srt.disaggregation.mini_lb",
                                     description="Route each request to a prefill and a decode server (round robin).")
    parser.add_argument("--prefill", nargs="+", action="append", required=True, metavar=("URL", "BOOTSTRAP_PORT"),
                        help=f"a prefill server and its --disaggregation-bootstrap-port (default {DEFAULT_BOOTSTRAP_PORT}); repeat for more")
    parser.add_argument("--decode", nargs=1, action="append", required=True, metavar="URL", help="a decode server; repeat for more")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    args = parser.parse_args(argv)
    prefills = []
    for item in args.prefill:
        if len(item) > 2 or (len(item) == 2 and not item[1].isdigit()):
            parser.error(f"--prefill takes URL [BOOTSTRAP_PORT], got {' '.join(item)}")
        prefills.append(Prefill(item[0].rstrip("/"), int(item[1]) if len(item) == 2 else DEFAULT_BOOTSTRAP_PORT))
    args.prefills, args.decodes = prefills, [d[0].rstrip("/") for d in args.decode]
    return args


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=getattr(logging, args.log_level.upper()), format="[%(asctime)s] %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per proxied request otherwise
    router = Router(args.prefills, args.decodes)
    logger.info("mini_lb on http://%s:%d: prefill %s, decode %s", args.host, args.port,
                [f"{p.url} (bootstrap {p.bootstrap_port})" for p in args.prefills], args.decodes)
    uvicorn.run(build_app(router), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
