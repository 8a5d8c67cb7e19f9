"""The OpenAPI document as the servers really answer: errors are 4xx/5xx with the OpenAI error body.

FastAPI documents a 422 validation error on every route with a body; the request guard and handlers
(``sglang.utils.http_common``) answer 400 instead, and any route may answer 401, 404, 405, 413 or 5xx.
Each operation therefore documents its own success responses (its route says their content types) and
one ``default`` response, the OpenAI error body, for every error status. Who may call: ``install_common``.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["error"],
    "properties": {"error": {"type": "object", "required": ["message", "type", "code"], "properties": {
        "message": {"type": "string"}, "type": {"type": "string"},
        "param": {"type": ["string", "null"]}, "code": {"type": ["string", "integer", "null"]}}}},
}
SSE = {"text/event-stream": {"schema": {"type": "string"}}}  # what a route with "stream": true answers


def truthful(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with FastAPI's 422 replaced by the ``default`` error response on every operation."""
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components["ErrorResponse"] = ERROR_SCHEMA
    for ops in schema.get("paths", {}).values():
        for op in ops.values():
            responses = op.setdefault("responses", {})
            responses.pop("422", None)
            responses["default"] = {"description": "an error, with the OpenAI error body",
                                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}}}
    for name in ("HTTPValidationError", "ValidationError"):  # referenced only by the 422s just removed
        components.pop(name, None)
    return schema


def install(app: FastAPI) -> None:
    """Serve the truthful document at ``/openapi.json`` (built once, at its first request)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = truthful(get_openapi(title=app.title, version=app.version, routes=app.routes))
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
