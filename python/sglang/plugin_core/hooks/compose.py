"""Build the one-frame wrapper that runs a target's hook chain.

Layers are given outermost first. BEFORE hooks run in that order, AFTER hooks
in reverse (onion order), and each AROUND receives everything inside it as
``original_fn``. The code for each segment between AROUND hooks is generated as
a single function, so BEFORE+AFTER around a target cost one extra Python frame,
the same as a hand-written closure, instead of one frame per hook.

Every hook call sits in a ``try`` (free until something raises): an exception
that leaves a hook is attributed to it once (``blame_of(exc)`` gives the
``HookSpec``), re-raised unchanged, and reported to ``on_error``. An exception
that leaves the original target is marked as the target's own, so an AROUND
hook that lets it pass is not blamed for it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from sglang.plugin_core.errors import HookApplyError, HookReturnError
from sglang.plugin_core.hooks.types import NONE_RESULT, HookSpec, HookType

_BLAME = "__sglang_hook_blame__"
_TARGET_OWN = object()  # marks an exception raised by the original target itself


def blame_of(exc: BaseException) -> HookSpec | None:
    """The hook an exception escaped from, or ``None`` (raised by the target or outside any hook)."""
    spec = getattr(exc, _BLAME, None)
    return spec if isinstance(spec, HookSpec) else None


def _passed_through(exc: BaseException, code: Any) -> bool:
    """Whether ``exc`` was raised in (or below) a frame running ``code``."""
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code is code:
            return True
        tb = tb.tb_next
    return False


def _make_blame(on_error: Callable[[HookSpec, BaseException], None] | None) -> Callable[[BaseException, Any], None]:
    def blame(exc: BaseException, spec: Any, inner_code: Any = None) -> None:
        if inner_code is not None and _passed_through(exc, inner_code):
            spec = _TARGET_OWN  # it left the original target: the AROUND hook only let it through
        if getattr(exc, _BLAME, None) is not None:
            return  # an inner hook, or the target, already owns it
        try:
            setattr(exc, _BLAME, spec)
        except (AttributeError, TypeError):  # an exception type with __slots__: leave it unattributed
            return
        if spec is not _TARGET_OWN and on_error is not None:
            on_error(spec, exc)

    return blame


def _make_unpack(target: str) -> Callable[[Any, Any], tuple[tuple, dict]]:
    def unpack(ret: Any, hook: Any) -> tuple[tuple, dict]:
        if type(ret) is tuple and len(ret) == 2 and isinstance(ret[0], (tuple, list)) and isinstance(ret[1], dict):
            return tuple(ret[0]), ret[1]
        name = getattr(hook, "__qualname__", repr(hook))
        raise HookReturnError(
            f"BEFORE hook {name} on {target!r} returned {type(ret).__name__}; "
            "return None to keep the arguments or a pair (args_tuple, kwargs_dict) to replace them"
        )

    return unpack


def _guarded(call: str, spec_name: str, indent: str = "    ", extra: str = "") -> list[str]:
    """``call`` (an assignment) inside a try that attributes an escaping exception to ``spec_name``."""
    return [f"{indent}try:", f"{indent}    {call}", f"{indent}except Exception as _e:", f"{indent}    _blame(_e, {spec_name}{extra})", f"{indent}    raise"]


def _segment(core: Callable[..., Any], layers: Sequence[HookSpec], *, is_async: bool, target: str, depth: int,
             core_spec: HookSpec | None, blame: Callable[[BaseException, Any], None]) -> Callable[..., Any]:
    around_at = next((i for i, h in enumerate(layers) if h.type is HookType.AROUND), None)
    ns: dict[str, Any] = {
        "_NONE": NONE_RESULT,
        "_unpack": _make_unpack(target),
        "_isawaitable": inspect.isawaitable,
        "_blame": blame,
        "_core_spec": core_spec if core_spec is not None else _TARGET_OWN,
    }
    own = list(layers if around_at is None else layers[:around_at])
    aw = "await " if is_async else ""

    def call(fn: Any) -> str:
        if inspect.iscoroutinefunction(fn) and not is_async:
            raise HookApplyError(f"async hook {getattr(fn, '__qualname__', fn)} cannot wrap the synchronous target {target!r}; make the hook synchronous")
        return "await " if inspect.iscoroutinefunction(fn) else ""

    lines = [f"{'async ' if is_async else ''}def _chain_{depth}(*args, **kwargs):"]
    for i, h in enumerate(own):
        ns[f"_h{i}"] = h.fn
        ns[f"_s{i}"] = h
        if h.type is HookType.BEFORE:
            lines += _guarded(f"_r = {call(h.fn)}_h{i}(*args, **kwargs)", f"_s{i}")
            lines += [
                "    if _r is not None:",
                f"        args, kwargs = _unpack(_r, _h{i})",
            ]
        elif any(o.type is HookType.BEFORE for o in own[i + 1 :]):
            lines.append(f"    _a{i}, _k{i} = args, kwargs")  # args as this layer saw them
    if around_at is None:
        ns["_core"] = core
        lines += _guarded(f"result = {aw}_core(*args, **kwargs)", "_core_spec")
    else:
        around = layers[around_at].fn
        inner_layers = layers[around_at + 1 :]
        ns["_around"] = around
        ns["_sa"] = layers[around_at]
        extra = ""
        if not inner_layers and core_spec is None and isinstance(getattr(core, "__code__", None), type(compile("0", "", "eval"))):
            # the original target itself: no extra frame; what escapes it is recognised by its code object on the traceback
            ns["_inner"], ns["_inner_code"], extra = core, core.__code__, ", _inner_code"
        else:  # a generated segment marks what escapes the target as its own
            ns["_inner"] = _segment(core, inner_layers, is_async=is_async, target=target, depth=depth + 1, core_spec=core_spec, blame=blame)
        if is_async and not inspect.iscoroutinefunction(around):
            lines += _guarded("result = _around(_inner, *args, **kwargs)", "_sa", extra=extra)
            lines += _guarded("result = (await result) if _isawaitable(result) else result", "_sa", extra=extra)
        else:
            lines += _guarded(f"result = {call(around)}_around(_inner, *args, **kwargs)", "_sa", extra=extra)
    for i in reversed(range(len(own))):
        h = own[i]
        if h.type is not HookType.AFTER:
            continue
        a, k = (f"_a{i}", f"_k{i}") if f"    _a{i}, _k{i} = args, kwargs" in lines else ("args", "kwargs")
        lines += _guarded(f"_r = {call(h.fn)}_h{i}(result, *{a}, **{k})", f"_s{i}")
        lines += [
            "    if _r is not None:",
            "        result = None if _r is _NONE else _r",
        ]
    lines.append("    return result")
    code = compile("\n".join(lines) + "\n", f"<sglang hook chain {target} #{depth}>", "exec")
    exec(code, ns)
    fn = ns[f"_chain_{depth}"]
    fn.__qualname__ = fn.__name__ = f"{target.rpartition('.')[2]}<hook chain {depth}>"
    return fn


def compose(core: Callable[..., Any], layers: Sequence[HookSpec], *, target: str, core_spec: HookSpec | None = None,
            on_error: Callable[[HookSpec, BaseException], None] | None = None) -> Callable[..., Any]:
    """Return one function running ``layers`` (outermost first) around ``core``.

    ``core`` is the original target, or the winning REPLACE (``core_spec``, so
    that what it raises is attributed to it). A coroutine-function core gets an
    ``async def`` chain that awaits it. ``on_error(spec, exc)`` is called once
    for each exception a hook raises (it must not raise).
    """
    if not layers and core_spec is None:
        return core
    is_async = inspect.iscoroutinefunction(core)
    return _segment(core, layers, is_async=is_async, target=target, depth=0, core_spec=core_spec, blame=_make_blame(on_error))
