"""The SGLang-native routes, in upstream SGLang's shapes (its ``bench_serving --backend sglang`` and
its frontend's ``RuntimeEndpoint`` read them): ``/generate``, ``/get_server_info``, ``/get_model_info``
(and the ``/server_info``, ``/model_info`` aliases), ``/abort_request``, ``/start_profile``, ``/stop_profile``,
``/load_lora_adapter``, ``/unload_lora_adapter``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse

import sglang
from sglang.srt.entrypoints.openai.protocol import AbortRequest, GenerateRequest, LoadLoRARequest, ProfileRequest, UnloadLoRARequest
from sglang.srt.entrypoints.openai.serving import error_event
from sglang.utils.http_common import error, sse_data
from sglang.utils.openapi import SSE

if TYPE_CHECKING:
    from sglang.srt.server_args import ServerArgs


# upstream's LoRAUpdateOutput: answered with 200, or 400 when success is false; a malformed body is the OpenAI error
_LORA_UPDATE = {"type": "object", "required": ["success", "error_message", "loaded_adapters"],
                "properties": {"success": {"type": "boolean"}, "error_message": {"type": ["string", "null"]},
                               "loaded_adapters": {"type": "object", "additionalProperties": {"type": "string"}}}}
LORA_UPDATE_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"description": "the adapter was loaded or unloaded", "content": {"application/json": {"schema": _LORA_UPDATE}}},
    400: {"description": "not done (success false), or a malformed request (the OpenAI error body)",
          "content": {"application/json": {"schema": {"anyOf": [_LORA_UPDATE, {"$ref": "#/components/schemas/ErrorResponse"}]}}}},
}


def _sse(stream: Any) -> StreamingResponse:
    return StreamingResponse(stream, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


def _with_text(meta: dict[str, Any], decode: Callable[[int], str]) -> None:
    """``return_text_in_logprobs``: fill the third field of every ``(logprob, token_id, text)`` triple."""
    for key in ("input_token_logprobs", "output_token_logprobs"):
        if meta.get(key):
            meta[key] = [(lp, t, decode(t)) for lp, t, _ in meta[key]]
    for key in ("input_top_logprobs", "output_top_logprobs"):
        if meta.get(key):
            meta[key] = [None if top is None else [(lp, t, decode(t)) for lp, t, _ in top] for top in meta[key]]


def _bootstrap(req: Any, i: int) -> dict[str, Any] | None:
    """The bootstrap fields of a body's ``i``-th request; a room list too short for it is a 400."""
    from sglang.srt.managers.request_errors import RequestError

    try:
        return req.bootstrap_for(i)
    except ValueError as exc:
        raise RequestError(str(exc), "bootstrap_room") from None


def server_info(engine: Any, server_args: ServerArgs) -> dict[str, Any]:
    """Upstream's ``/get_server_info``: the server args at the top level, ``internal_states`` (one per
    scheduler) and ``version``; this project's provenance, platform, plugins and hooks under their own keys."""
    from sglang.srt.arg_groups.dump import resolved_with_provenance
    from sglang.srt.platforms import get_platform_decision
    from sglang.srt.plugins import plugin_records
    from sglang.srt.plugins.hook_registry import HookRegistry

    tm = engine.tokenizer_manager
    resolved = resolved_with_provenance(server_args)
    return {
        **{name: v["value"] for name, v in resolved.items()},  # secrets are already masked
        "version": sglang.__version__,
        "internal_states": tm.internal_states(),
        "server_args": resolved,
        "runtime": engine.get_server_info(),
        "platform": get_platform_decision().as_dict(),
        "plugins": [r.as_dict() for r in plugin_records()],
        "hooks": {t: [{"type": e.type.name, "hook": e.hook, "plugin": e.plugin, "dist": e.dist} for e in HookRegistry.describe(t)]
                  for t in HookRegistry.applied_targets()},
        "hook_failures": tm.hook_failures(),
    }


def install_native_routes(app: FastAPI, engine: Any, server_args: ServerArgs, count: Callable[[str, int], None],
                          unless_disconnected: Callable[[Request, Awaitable[Any]], Awaitable[Any]]) -> None:
    """Register the native routes on ``app``; ``count`` records an error status per route."""
    tm = engine.tokenizer_manager

    def decode(t: int) -> str:
        return tm.tokenizer.decode([t], skip_special_tokens=False)

    def shaped(result: dict[str, Any], with_text: bool) -> dict[str, Any]:
        if with_text:
            _with_text(result["meta_info"], decode)
        return {"text": result["text"], "output_ids": result["output_ids"], "meta_info": result["meta_info"]}

    @app.post("/generate", responses={200: {"content": SSE}})
    async def generate(req: GenerateRequest, request: Request) -> Any:
        items = req.items()
        states = []
        try:
            for i, ((text, ids, params, rid), lora) in enumerate(zip(items, req.lora_paths())):
                states.append(await engine.aopen_request(text, params, ids, rid=rid, bootstrap=_bootstrap(req, i), lora_path=lora,
                                                              stream=bool(req.stream)))
        except BaseException:
            for st in states:  # a later prompt was refused: the earlier ones must not run on
                tm.abort(st.rid)
            raise
        if req.stream:
            st = states[0]

            async def events() -> Any:
                try:
                    async for c in engine.stream_request(st):
                        yield sse_data(shaped(c, req.return_text_in_logprobs))
                except Exception as exc:
                    count("/generate", 500)
                    yield error_event(exc)
                yield "data: [DONE]\n\n"

            return _sse(events())

        async def finish() -> Any:
            try:
                for st in states:
                    await engine.wait_request(st)
            finally:  # cancelled or failed while waiting for one: the others must not run on
                for st in states:
                    if st.finished is None and st.error is None:
                        tm.abort(st.rid)
            out = [shaped(engine.result(st), req.return_text_in_logprobs) for st in states]
            return out if req.batch_size is not None else out[0]

        return await unless_disconnected(request, finish())

    @app.get("/get_server_info")
    @app.get("/server_info")
    async def get_server_info() -> dict[str, Any]:
        return server_info(engine, server_args)

    @app.get("/get_model_info")
    @app.get("/model_info")
    async def get_model_info() -> dict[str, Any]:
        from sglang.srt.configs.generation_config import preferred_sampling_params

        preferred = server_args.preferred_sampling_params
        return {
            "model_path": server_args.model_path,
            "tokenizer_path": server_args.tokenizer_path or server_args.model_path,
            "is_generation": True,
            # upstream's field: --preferred-sampling-params as an object, null when unset
            "preferred_sampling_params": preferred_sampling_params(preferred) if preferred is not None else None,
            # this project's: what a request's missing fields take (the model's defaults under the preferred ones)
            "default_sampling_params": dict(tm.sampling_defaults),
            "weight_version": "default",
            "has_image_understanding": False,
            "has_audio_understanding": False,
        }

    @app.post("/abort_request", response_class=PlainTextResponse)
    async def abort_request(req: AbortRequest) -> Response:
        if req.abort_all:
            for rid in list(tm.states):
                tm.abort(rid)
        elif req.rid:
            tm.abort(req.rid)
        else:
            return error(400, "pass the 'rid' of the request to abort, or abort_all: true", param="rid")
        return PlainTextResponse("")

    @app.post("/load_lora_adapter", responses=LORA_UPDATE_RESPONSES)
    async def load_lora_adapter(body: LoadLoRARequest) -> Any:
        out = await asyncio.to_thread(engine.load_lora_adapter, body.lora_name, body.lora_path, body.pinned)
        return out if out["success"] else JSONResponse(out, status_code=400)

    @app.post("/unload_lora_adapter", responses=LORA_UPDATE_RESPONSES)
    async def unload_lora_adapter(body: UnloadLoRARequest) -> Any:
        out = await asyncio.to_thread(engine.unload_lora_adapter, body.lora_name)  # waits for the adapter's requests
        return out if out["success"] else JSONResponse(out, status_code=400)

    @app.post("/start_profile", response_class=PlainTextResponse)
    async def start_profile(body: ProfileRequest | None = None) -> Any:
        body = body or ProfileRequest()
        root = server_args.profile_dir
        if not root:
            return error(400, "profiling is not configured: start the server with --profile-dir DIR", param="output_dir")
        out_dir = os.path.realpath(os.path.join(root, body.output_dir or ""))
        if os.path.commonpath([out_dir, os.path.realpath(root)]) != os.path.realpath(root):
            # a client names a subdirectory of --profile-dir, never a path elsewhere on the server
            return error(400, f"output_dir must be a relative path inside --profile-dir, got {body.output_dir!r}", param="output_dir")
        await asyncio.to_thread(engine.start_profile, out_dir, body.num_steps)
        return Response("Start profiling.\n", media_type="text/plain")

    @app.post("/stop_profile")
    async def stop_profile() -> Any:
        try:
            paths = await asyncio.to_thread(engine.stop_profile)
        except RuntimeError as exc:
            return error(400, str(exc))
        return {"message": "Stop profiling. Traces are written.", "traces": paths}


__all__ = ["install_native_routes", "server_info"]
