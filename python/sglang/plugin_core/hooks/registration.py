"""Registration: validating hooks, attributing them to a plugin, ordering them.

Registration validates everything it can without importing the target (type,
callable, class-only-for-REPLACE, parameters that fit the type, target
syntax); it never resolves the target. Within a target, hooks keep
registration order (:func:`call_order` turns that into the composition).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, ClassVar

from sglang.plugin_core.errors import HookRegistrationError
from sglang.plugin_core.hooks.state import _positional_capacity, _State
from sglang.plugin_core.hooks.targets import Resolved, TargetName, parse_target, resolve_target
from sglang.plugin_core.hooks.types import HookSource, HookSpec, HookType, source_label

if TYPE_CHECKING:
    import contextvars

_UNSET: Any = object()


def call_order(specs: list[HookSpec]) -> list[HookSpec]:
    """Layers of one target, outermost first, as upstream SGLang composes them.

    BEFORE hooks run first in registration order; then the AROUND hooks nest,
    the last registered outermost; then the core; then AFTER hooks in
    registration order. (The composer runs a segment's AFTER hooks in reverse,
    so they are listed reversed.) REPLACE hooks are not layers.
    """
    by_seq = sorted(specs, key=lambda s: s.seq)
    before = [s for s in by_seq if s.type is HookType.BEFORE]
    after = [s for s in by_seq if s.type is HookType.AFTER]
    around = [s for s in by_seq if s.type is HookType.AROUND]
    return before + after[::-1] + around[::-1]


class RegistrationMixin:
    """The registration half of a hook registry (state owned by the concrete class)."""

    _state: ClassVar[_State]
    _source_var: ClassVar[contextvars.ContextVar[HookSource | None]]

    @classmethod
    def current_source(cls) -> HookSource | None:
        """The plugin whose callback is running (``None`` outside any plugin)."""
        return cls._source_var.get()

    @classmethod
    @contextlib.contextmanager
    def registering_as(cls, source: HookSource | None) -> Iterator[None]:
        """Attribute every hook registered in this block to ``source`` (what ``load_plugins`` does
        around a plugin's callback; the developer kit does the same)."""
        token = cls._source_var.set(source)
        try:
            yield
        finally:
            cls._source_var.reset(token)

    @classmethod
    def resolve(cls, target: str, who: str = "resolve") -> Resolved:
        """Import and walk ``target`` as the registry would when applying it (module hints included);
        raises :class:`HookTargetError` naming what is missing (and ``who`` asked)."""
        name = parse_target(target, who)
        with cls._state.lock:
            hint = cls._state.hints.get(name.key, name.module_hint)
        return resolve_target(TargetName(name.key, hint), who)

    @classmethod
    def _validate(cls, target: str, fn: Any, hook_type: Any, source: HookSource | None) -> tuple[TargetName, HookType]:
        who = source_label(source, fn)
        try:
            htype = HookType.coerce(hook_type)
        except ValueError as exc:
            raise HookRegistrationError(f"{who}: {exc}") from None
        is_class = inspect.isclass(fn)
        if is_class and htype is not HookType.REPLACE:
            raise HookRegistrationError(
                f"{who}: {fn.__qualname__} is a class, and only HookType.REPLACE accepts a class "
                f"(got {htype.name} for {target!r}); to hook construction target '{target}.__init__'"
            )
        if not callable(fn):
            raise HookRegistrationError(f"{who}: hook for {target!r} must be callable, got {type(fn).__name__}")
        if htype in (HookType.AROUND, HookType.AFTER) and _positional_capacity(fn) == 0:
            first = "original_fn" if htype is HookType.AROUND else "result"
            raise HookRegistrationError(
                f"{who}: {htype.name} hook {getattr(fn, '__qualname__', fn)} for {target!r} takes no positional "
                f"argument; its first parameter receives {first}"
            )
        return parse_target(target, who), htype

    @classmethod
    def _add(cls, target: str, fn: Any, hook_type: Any, source: Any) -> HookSpec:
        """Validate and record one hook; the caller holds the lock and re-applies if needed."""
        src = cls.current_source() if source is _UNSET or source is None else source
        name, htype = cls._validate(target, fn, hook_type, src)
        st = cls._state
        spec = HookSpec(name.key, fn, htype, src, next(st.seq))
        st.rank.setdefault(src, len(st.rank))
        st.hooks.setdefault(name.key, []).append(spec)
        if name.module_hint:
            st.hints[name.key] = name.module_hint
        return spec

    @classmethod
    def _remove(cls, spec: HookSpec) -> None:
        hooks = cls._state.hooks
        hooks[spec.target].remove(spec)
        if not hooks[spec.target]:
            del hooks[spec.target]

    @classmethod
    def _drop(cls, source: HookSource | None, reason: str, target: str | None = None) -> int:
        """Forget the hooks of ``source`` (on ``target`` only, when given), remembering ``reason``."""
        st = cls._state
        n = 0
        for key in [target] if target is not None else list(st.hooks):
            gone = [s for s in st.hooks.get(key, ()) if s.source == source]
            st.skipped.extend((s, reason) for s in gone)
            n += len(gone)
            for s in gone:
                cls._remove(s)
        return n

    @classmethod
    def discard(cls, source: HookSource | None, reason: str = "discarded") -> int:
        """Drop every hook ``source`` registered (remembering ``reason``) and re-compose what it had patched."""
        st = cls._state
        with st.lock:
            n = cls._drop(source, reason)
            if n and st.patches:
                cls._apply_locked(frozenset(), None)  # type: ignore[attr-defined]
            return n

    @classmethod
    def registered(cls, target: str | None = None) -> list[HookSpec]:
        """Registered hooks (of one target, or all), in registration order."""
        st = cls._state
        with st.lock:
            if target is None:
                return sorted((s for key in st.hooks for s in st.hooks[key]), key=lambda s: (s.target, s.seq))
            key = parse_target(target, "describe").key
            return sorted(st.hooks.get(key, ()), key=lambda s: s.seq)
