"""What both runtimes' HTTP servers share: OpenAI-style errors, API-key auth, 400 on bad bodies."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response


def error(status: int, message: str, etype: str = "invalid_request_error", param: str | None = None, code: str | None = None) -> JSONResponse:
    """An OpenAI-style error body."""
    return JSONResponse({"error": {"message": message, "type": etype, "param": param, "code": code}}, status_code=status)


def install_common(app: FastAPI, api_key: str | None) -> None:
    """``--api-key`` guards every route but ``/health``; a body that fails validation is a 400 naming the field."""

    @app.middleware("http")
    async def auth(request: Request, call_next: Any) -> Response:
        if api_key and request.url.path != "/health":
            if request.headers.get("authorization") != f"Bearer {api_key}":
                return error(401, "invalid or missing API key: send 'Authorization: Bearer <key>'", "authentication_error", code="invalid_api_key")
        return await call_next(request)

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        loc = ".".join(str(x) for x in first.get("loc", ()) if x != "body")
        return error(400, f"{loc or 'body'}: {first.get('msg', 'invalid request')}", param=loc or None)
