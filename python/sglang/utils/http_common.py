"""What both runtimes' HTTP servers share: the request guard and OpenAI-shaped errors.

Every response with a 4xx or 5xx status, FastAPI's and Starlette's own
included (bad JSON, bad UTF-8, 404, 405, 413), carries the OpenAI error body
``{"error": {"message", "type", "param", "code"}}``. The guard is a plain ASGI
middleware (it sees every request before routing):

- ``Host:`` must be one of the allowed hosts (DNS-rebinding protection), else 400;
- ``--api-key`` guards every route but ``/health`` (401); the key is compared in
  constant time and never echoed;
- a body over ``--max-request-bytes`` gets 413, whether it declares its
  length or streams it.

A refused request whose body is still arriving is answered first and then
closed the way servers with a "lingering close" do: the answer goes out with
``Connection: close``, the rest of the body is read and discarded (at most
``DRAIN_BYTES`` bytes for at most ``DRAIN_SECONDS``), and only then does the
connection close. Closing on unread bytes would make the kernel reset the
connection, and a client that sends its whole body before reading (urllib,
http.client, requests) would see ``ConnectionResetError`` instead of the error.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from sglang.plugin_core.hooks.faults import describe_fault, hook_of

logger = logging.getLogger(__name__)

ASGIApp = Callable[[dict[str, Any], Callable[[], Awaitable[dict[str, Any]]], Callable[[dict[str, Any]], Awaitable[None]]], Awaitable[None]]
WILDCARD_HOSTS = ("0.0.0.0", "::", "")
_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error",
          405: "invalid_request_error", 408: "timeout_error", 413: "invalid_request_error", 422: "invalid_request_error",
          429: "rate_limit_error", 503: "server_error"}
# the lingering close's bounds: a client cannot hold a connection (or the loop) longer or feed it more than this
DRAIN_BYTES = 64 << 20
DRAIN_SECONDS = 10.0


def sse_data(obj: Any) -> str:
    """One server-sent event carrying ``obj`` as JSON (``data: ...`` and the blank line). orjson, as upstream
    SGLang's server serializes its stream chunks: a streamed token costs one of these per request, and on two
    cores the time the HTTP process spends on it is taken from the decode step's threads."""
    try:
        body = orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS).decode()
    except orjson.JSONEncodeError:  # a lone surrogate or an integer past 64 bits, which the standard library writes
        body = json.dumps(obj)
    return "data: " + body + "\n\n"


def error_body(status: int, message: str, etype: str | None = None, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": etype or _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error"),
                      "param": param, "code": code}}


def error(status: int, message: str, etype: str | None = None, param: str | None = None, code: str | None = None) -> JSONResponse:
    """An OpenAI-style error response."""
    return JSONResponse(error_body(status, message, etype, param, code), status_code=status)


def allowed_hosts(host: str, configured: str | None) -> frozenset[str] | None:
    """The accepted ``Host:`` names (``None``: any). Default: the bound host and the loopback names,
    or any host when the server binds every interface."""
    if configured:
        names = {h.strip().lower() for h in configured.split(",") if h.strip()}
        return None if "*" in names else frozenset(names)
    if host in WILDCARD_HOSTS:
        return None
    return frozenset({host.lower().strip("[]"), "localhost", "127.0.0.1", "::1"})


def _host_name(value: str) -> str:
    value = value.strip().lower()
    if value.startswith("["):  # [::1]:30000
        return value[1 : value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class RequestGuard:
    """ASGI middleware: Host check, API key, body size limit (see the module docstring)."""

    def __init__(self, app: ASGIApp, api_key: str | None, max_body: int, hosts: frozenset[str] | None,
                 open_paths: Iterable[str] = ("/health",), on_reject: Callable[[str, int], None] | None = None,
                 drain_bytes: int = DRAIN_BYTES, drain_seconds: float = DRAIN_SECONDS) -> None:
        self.app, self.api_key, self.max_body, self.hosts = app, api_key, max_body, hosts
        self.drain_bytes, self.drain_seconds = drain_bytes, drain_seconds
        self.open_paths = frozenset(open_paths)
        self.on_reject = on_reject

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}
        path = scope.get("path", "")
        if self.hosts is not None and _host_name(headers.get("host", "")) not in self.hosts:
            await self._reject(headers, receive, send, path, 400, "the Host header is not one this server answers to; add it with --allowed-hosts",
                               code="invalid_host")
            return
        if self.api_key and path not in self.open_paths:
            given = headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {self.api_key}".encode()):
                await self._reject(headers, receive, send, path, 401, "invalid or missing API key: send 'Authorization: Bearer <key>'",
                                   code="invalid_api_key")
                return
        declared = headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_body):
            await self._reject(headers, receive, send, path, 413, self._too_large(), code="request_too_large")
            return
        over = {"limit": False}
        await self.app(scope, self._counting(receive, over), self._lingering(receive, send, over))

    def _too_large(self) -> str:
        return f"the request body is larger than {self.max_body} bytes; raise --max-request-bytes to accept it"

    def _counting(self, receive: Any, over: dict[str, bool]) -> Any:
        seen = 0

        async def wrapped() -> dict[str, Any]:
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.max_body:
                    over["limit"] = msg.get("more_body", False)  # the rest is still on its way: drain it after the 413
                    raise StarletteHTTPException(413, self._too_large())
            return msg

        return wrapped

    def _lingering(self, receive: Any, send: Any, over: dict[str, bool]) -> Any:
        """``send``, except that the answer to a streamed body cut off at the limit closes with a drain."""

        async def wrapped(msg: dict[str, Any]) -> None:
            if not over["limit"]:
                await send(msg)
            elif msg["type"] == "http.response.start":
                await send({**msg, "headers": [*msg.get("headers", ()), (b"connection", b"close")]})
            elif msg["type"] == "http.response.body" and not msg.get("more_body", False):
                await send({**msg, "more_body": True})
                await _discard(receive, self.drain_bytes, self.drain_seconds)
                await send({"type": "http.response.body", "body": b""})
            else:
                await send(msg)

        return wrapped

    async def _reject(self, headers: dict[str, str], receive: Any, send: Any, path: str, status: int, message: str, code: str) -> None:
        if self.on_reject is not None:
            self.on_reject(path, status)
        body = json.dumps(error_body(status, message, code=code)).encode()
        declared = headers.get("content-length", "")
        pending = "chunked" in headers.get("transfer-encoding", "").lower() or (declared.isdigit() and int(declared) > 0)
        out = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        if not pending:
            await send({"type": "http.response.start", "status": status, "headers": out})
            await send({"type": "http.response.body", "body": body})
            return
        # the whole answer first (its length tells the client it is complete), then the drain, then the close
        await send({"type": "http.response.start", "status": status, "headers": [*out, (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body, "more_body": True})
        await self._drain(headers, receive)
        await send({"type": "http.response.body", "body": b""})

    async def _drain(self, headers: dict[str, str], receive: Any) -> None:
        """Read and discard the rest of a refused body: at most ``drain_bytes`` for at most ``drain_seconds``
        (then the connection closes on whatever is left)."""
        declared = headers.get("content-length", "")
        if headers.get("expect", "").lower() == "100-continue":
            return  # the client waits for a go-ahead it never gets: no body comes
        if declared.isdigit() and int(declared) > self.drain_bytes:
            return  # more than the bound would ever read: close now
        await _discard(receive, self.drain_bytes, self.drain_seconds)


async def _discard(receive: Any, most: int, seconds: float) -> None:
    deadline, read = time.monotonic() + seconds, 0
    while read <= most:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        try:
            msg = await asyncio.wait_for(receive(), left)
        except asyncio.TimeoutError:
            return
        if msg["type"] != "http.request":
            return  # http.disconnect: the client is gone
        read += len(msg.get("body", b""))
        if not msg.get("more_body", False):
            return


_TYPE_TAGS = frozenset({"str", "int", "float", "bool", "list", "dict", "none", "constrained-str", "constrained-int"})


def _field_path(loc: tuple[Any, ...]) -> str:
    """``sampling_params.temperature`` from a pydantic location, without the tags pydantic adds for each
    member of a union (``GenerateSamplingParams``, ``function-after[...]``, ``list[...]``): fields are snake_case."""
    parts = [str(x) for x in loc if x != "body"]
    return ".".join(p for p in parts if not ("[" in p or "(" in p or p[:1].isupper() or p in _TYPE_TAGS))


def _validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    errors = exc.errors()
    # a union reports one error per member; the one that is not a plain type mismatch says what is wrong
    # with the value as sent (a list of 65 prompts: "at most 64", not "should be a valid string")
    first = next((e for e in errors if not str(e.get("type", "")).endswith("_type")), errors[0] if errors else {})
    loc = _field_path(tuple(first.get("loc", ())))
    kind = first.get("type", "")
    if kind == "extra_forbidden":
        return f"unsupported field {loc!r}: this server does not implement it; remove it from the request", loc or None
    if kind in ("json_invalid", "json_type"):
        return f"the body is not valid JSON: {first.get('ctx', {}).get('error', '')}".rstrip(": "), None
    if not loc and kind in ("model_attributes_type", "dict_type", "model_type"):
        return "the body must be a JSON object, sent with 'Content-Type: application/json'", None
    msg = first.get("msg", "invalid request")
    return (f"{loc}: {msg}" if loc else msg), loc or None


def install_common(app: FastAPI, api_key: str | None, max_body: int = 4 << 20, host: str = "127.0.0.1", hosts: str | None = None,
                   on_error: Callable[[str, int], None] | None = None, drain_bytes: int = DRAIN_BYTES,
                   drain_seconds: float = DRAIN_SECONDS) -> None:
    """The request guard plus handlers giving every error the OpenAI body.

    ``on_error(path, status)`` is told of every error response the guard or a
    handler produces (the metrics of failed requests). ``drain_bytes`` and
    ``drain_seconds`` bound the lingering close of a refused body.
    """

    from sglang.utils.openapi import install as install_openapi

    install_openapi(app)

    def note(request: Request, status: int) -> None:
        if on_error is not None:
            on_error(request.url.path, status)

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        message, param = _validation_message(exc)
        note(request, 400)
        return error(400, message, param=param)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        note(request, exc.status_code)
        detail = exc.detail if isinstance(exc.detail, str) else "request failed"
        if exc.status_code == 404:
            detail = f"no route {request.method} {request.url.path}; see the routes in docs/server.md"
        elif exc.status_code == 405:
            detail = f"{request.method} is not allowed on {request.url.path}"
        elif exc.status_code == 400 and "parsing the body" in detail:
            detail = "the body is not valid JSON (or not UTF-8)"
        return error(exc.status_code, detail, code="request_too_large" if exc.status_code == 413 else None)

    @app.exception_handler(Exception)
    async def internal(request: Request, exc: Exception) -> JSONResponse:
        logger.exception("%s %s failed: %s", request.method, request.url.path, describe_fault(exc))
        note(request, 500)
        if hook_of(exc) is not None:  # a plugin's hook raised: say which, as the engine does for its own path
            return error(500, f"the request failed: {describe_fault(exc)}", "server_error", code="plugin_error")
        return error(500, f"internal error while serving {request.url.path}: {type(exc).__name__}; see the server log", "server_error")

    app.add_middleware(RequestGuard, api_key=api_key, max_body=max_body, hosts=allowed_hosts(host, hosts), on_reject=on_error,
                       drain_bytes=drain_bytes, drain_seconds=drain_seconds)
