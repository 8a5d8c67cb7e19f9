"""Declarations: the only ways configuration is adjusted after the user set it.

- ``MODEL_OVERRIDES[arch] = {...}`` / ``@register_model_override(arch)``: per-
  architecture values, declared during resolution. Callables receive the
  *pristine* ``ServerArgs`` and the model's config dict and must not write.
- ``@register_post_process_pass(name)`` + ``run_post_process_pass``: a
  normalization that must see earlier declarations, run at its slot.
- ``declare(server_args, source, **fields)``: a declaration from code the
  pipeline invokes (a platform's ``apply_server_args_defaults``, a hook).
- ``declare_late_resolution(server_args, source, **fields)``: launcher-stage
  resolution, in place, before publish; refuses a published instance.
- ``declare_load_time_override(source, fields)``: values only knowable at
  weight-load time; whitelist-checked, then ``get_context().override``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from sglang.srt.arg_groups.errors import DeclarationError
from sglang.srt.arg_groups.resolution import check_declarable, resolved_view

if TYPE_CHECKING:
    from sglang.srt.server_args import ServerArgs

ModelOverrideFn = Callable[[Any, Mapping[str, Any]], Mapping[str, Any] | None]
PassFn = Callable[[Any], Mapping[str, Any] | None]

MODEL_OVERRIDES: dict[str, Mapping[str, Any] | ModelOverrideFn] = {}
POST_PROCESS_PASSES: dict[str, PassFn] = {}


def register_model_override(arch: str) -> Callable[[ModelOverrideFn], ModelOverrideFn]:
    """Register a callable ``(pristine_server_args, hf_config) -> {field: value}`` for ``arch``."""

    def deco(fn: ModelOverrideFn) -> ModelOverrideFn:
        if arch in MODEL_OVERRIDES:
            raise ValueError(f"a model override for {arch!r} is already registered")
        MODEL_OVERRIDES[arch] = fn
        return fn

    return deco


def model_override_declarations(server_args: ServerArgs, arch: str | None, hf_config: Mapping[str, Any]) -> Mapping[str, Any]:
    entry = MODEL_OVERRIDES.get(arch or "")
    if entry is None:
        return {}
    return dict(entry) if isinstance(entry, Mapping) else dict(entry(server_args, hf_config) or {})


def register_post_process_pass(name: str) -> Callable[[PassFn], PassFn]:
    """Register a pass ``(resolved_view) -> {field: value}`` run at slot ``name``."""

    def deco(fn: PassFn) -> PassFn:
        if name in POST_PROCESS_PASSES:
            raise ValueError(f"post-process pass {name!r} is already registered")
        POST_PROCESS_PASSES[name] = fn
        return fn

    return deco


def run_post_process_pass(server_args: ServerArgs, name: str) -> None:
    """Run pass ``name`` on the in-flight view and declare what it returns."""
    fn = POST_PROCESS_PASSES.get(name)
    if fn is None:
        raise KeyError(f"no post-process pass named {name!r}; registered: {sorted(POST_PROCESS_PASSES)}")
    decl = fn(resolved_view(server_args))
    if decl:
        declare(server_args, f"post-process pass {name}", **decl)


def declare(server_args: ServerArgs, source: str, **fields: Any) -> None:
    """Declare values while ``server_args`` resolves (platform defaults, hooks)."""
    res = server_args.__dict__.get("_resolution")
    if res is None:
        raise DeclarationError(
            f"{source}: declare() only works while ServerArgs.__post_init__ resolves. Before publish use "
            "declare_late_resolution(server_args, source, **fields); after it, get_context().override(source, **fields)"
        )
    res.declare(source, fields)


def declare_late_resolution(server_args: ServerArgs, source: str, **fields: Any) -> None:
    """Launcher-stage resolution, written in place so every holder sees it.

    Refuses an instance that has been published: after publish, config
    changes go through ``get_context().override``.
    """
    from sglang.srt.runtime_context import get_context

    if get_context().is_published(server_args):
        raise DeclarationError(
            f"{source}: declare_late_resolution() refuses a published ServerArgs; use "
            f"get_context().override({source!r}, {', '.join(f'{k}=...' for k in fields)})"
        )
    check_declarable(type(server_args), source, fields)
    for k, v in fields.items():
        object.__setattr__(server_args, k, v)
    server_args.__dict__.setdefault("_provenance", {}).update({k: f"late resolution ({source})" for k in fields})


def declare_load_time_override(source: str, fields: Mapping[str, Any]) -> None:
    """A value only knowable at weight-load time: whitelist, then the bags (never ServerArgs)."""
    from sglang.srt.runtime_context import get_context
    from sglang.srt.server_args import ServerArgs

    check_declarable(ServerArgs, source, fields)
    get_context().override(source, **fields)
