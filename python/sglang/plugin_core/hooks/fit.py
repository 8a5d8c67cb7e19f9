"""Does a hook's signature fit its type and its target? (``sglang plugins check``)

The target's positional parameters (``self``/``cls`` included for methods)
are passed as a call would pass them, plus its required keyword-only ones; an
AROUND hook receives the original first, an AFTER hook the result first.
"""

from __future__ import annotations

import inspect
from typing import Any

from sglang.plugin_core.hooks.types import HookType


def _target_callable(raw: Any) -> tuple[Any, bool]:
    """(function, whether calls pass ``self``/``cls`` positionally) of a resolved target attribute."""
    if isinstance(raw, staticmethod):
        return raw.__func__, False
    if isinstance(raw, classmethod):
        return raw.__func__, True
    if isinstance(raw, property):
        return raw.fget, True
    return raw, False


def hook_fit_problem(htype: HookType, hook: Any, raw_target: Any) -> str | None:
    """Why ``hook`` cannot be called as a ``htype`` hook of ``raw_target`` (``None`` when it can)."""
    if isinstance(hook, type):
        return None if htype is HookType.REPLACE else f"a class can only REPLACE, not {htype.name}"
    func, _ = _target_callable(raw_target)
    if isinstance(raw_target, type):
        return f"the target is a class: only REPLACE applies, not {htype.name}"
    try:
        tsig = inspect.signature(func)
        hsig = inspect.signature(hook)
    except (TypeError, ValueError):
        return None  # builtins without signatures: nothing to check
    params = list(tsig.parameters.values())
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    kw_only = {p.name: None for p in params if p.kind is p.KEYWORD_ONLY and p.default is p.empty}
    args: list[Any] = [None] * len(positional)
    if htype is HookType.AROUND:
        args = [None, *args]
    elif htype is HookType.AFTER:
        args = [None, *args]
    try:
        hsig.bind(*args, **kw_only)
    except TypeError as exc:
        first = {HookType.AROUND: "original_fn, ", HookType.AFTER: "result, "}.get(htype, "")
        names = ", ".join(p.name for p in positional)
        return f"{htype.name} hook{hsig} cannot take ({first}{names}) of the target{tsig}: {exc}"
    return None
