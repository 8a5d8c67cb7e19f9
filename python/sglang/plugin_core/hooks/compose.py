"""Build the one-frame wrapper that runs a target's hook chain.

Layers are given outermost first. BEFORE hooks run in that order, AFTER hooks
in reverse (onion order), and each AROUND receives everything inside it as
``original_fn``. The code for each segment between AROUND hooks is generated as
a single function, so BEFORE+AFTER around a target cost one extra Python frame,
the same as a hand-written closure, instead of one frame per hook.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from sglang.plugin_core.errors import HookApplyError, HookReturnError
from sglang.plugin_core.hooks.types import NONE_RESULT, HookSpec, HookType


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


def _segment(core: Callable[..., Any], layers: Sequence[HookSpec], *, is_async: bool, target: str, depth: int) -> Callable[..., Any]:
    around_at = next((i for i, h in enumerate(layers) if h.type is HookType.AROUND), None)
    ns: dict[str, Any] = {
        "_NONE": NONE_RESULT,
        "_unpack": _make_unpack(target),
        "_isawaitable": inspect.isawaitable,
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
        if h.type is HookType.BEFORE:
            lines += [
                f"    _r = {call(h.fn)}_h{i}(*args, **kwargs)",
                "    if _r is not None:",
                f"        args, kwargs = _unpack(_r, _h{i})",
            ]
        elif any(o.type is HookType.BEFORE for o in own[i + 1 :]):
            lines.append(f"    _a{i}, _k{i} = args, kwargs")  # args as this layer saw them
    if around_at is None:
        ns["_core"] = core
        lines.append(f"    result = {aw}_core(*args, **kwargs)")
    else:
        around = layers[around_at].fn
        inner_layers = layers[around_at + 1 :]
        ns["_around"] = around
        ns["_inner"] = _segment(core, inner_layers, is_async=is_async, target=target, depth=depth + 1) if inner_layers else core
        if is_async and not inspect.iscoroutinefunction(around):
            lines += ["    result = _around(_inner, *args, **kwargs)", "    if _isawaitable(result):", "        result = await result"]
        else:
            lines.append(f"    result = {call(around)}_around(_inner, *args, **kwargs)")
    for i in reversed(range(len(own))):
        h = own[i]
        if h.type is not HookType.AFTER:
            continue
        a, k = (f"_a{i}", f"_k{i}") if f"    _a{i}, _k{i} = args, kwargs" in lines else ("args", "kwargs")
        lines += [
            f"    _r = {call(h.fn)}_h{i}(result, *{a}, **{k})",
            "    if _r is not None:",
            "        result = None if _r is _NONE else _r",
        ]
    lines.append("    return result")
    code = compile("\n".join(lines) + "\n", f"<sglang hook chain {target} #{depth}>", "exec")
    exec(code, ns)
    fn = ns[f"_chain_{depth}"]
    fn.__qualname__ = fn.__name__ = f"{target.rpartition('.')[2]}<hook chain {depth}>"
    return fn


def compose(core: Callable[..., Any], layers: Sequence[HookSpec], *, target: str) -> Callable[..., Any]:
    """Return one function running ``layers`` (outermost first) around ``core``.

    ``core`` is the original target or the winning REPLACE. A coroutine-function
    core gets an ``async def`` chain that awaits it.
    """
    if not layers:
        return core
    is_async = inspect.iscoroutinefunction(core)
    return _segment(core, layers, is_async=is_async, target=target, depth=0)
