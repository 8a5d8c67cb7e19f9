"""A process-local hook registry; each runtime subclasses it to get its own state.

Composition order (documented in ``docs/plugins.md``): the last REPLACE is the
core (a second REPLACE warns naming both); BEFORE/AFTER/AROUND hooks then wrap
it in plugin order, then registration order, the first one outermost. Class
replacements are applied before function and method targets, so a method
target under a replaced class resolves through the replacement.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import warnings
from collections.abc import Callable, Iterable, Iterator
from types import ModuleType
from typing import Any, ClassVar

from sglang.plugin_core.errors import HookApplyError, HookRegistrationError, PluginError, PluginLoadError
from sglang.plugin_core.hooks.aliases import rebind_aliases, restore_aliases
from sglang.plugin_core.hooks.compose import compose
from sglang.plugin_core.hooks.state import HookFailure, _Patch, _positional_capacity, _State
from sglang.plugin_core.hooks.targets import Resolved, TargetName, parse_target, resolve_target
from sglang.plugin_core.hooks.types import ChainEntry, HookSpec, HookType, PluginSource, new_source_var

logger = logging.getLogger(__name__)

_MISSING = object()


class HookConflictWarning(UserWarning):
    """Two REPLACE hooks target the same thing; the later one wins."""


class HookRegistryBase:
    """Register hooks, apply them to their targets, describe and undo them.

    All methods are classmethods over state owned by the concrete subclass.
    Thread-safe; registration validates everything it can without importing
    the target (type, callable, class-only-for-REPLACE, target syntax).
    """

    _runtime: ClassVar[str] = "base"
    _selector_env: ClassVar[str] = "SGLANG_PLATFORM"
    _state: ClassVar[_State]
    _source_var: ClassVar[Any]

    def __init_subclass__(cls, runtime: str = "", selector_env: str = "SGLANG_PLATFORM", **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._selector_env = selector_env
        if runtime:
            cls._runtime = runtime
            cls._state = _State()
            cls._source_var = new_source_var(runtime)

    # -- registration -------------------------------------------------------

    @classmethod
    def current_source(cls, fn: Any = None) -> PluginSource:
        src = cls._source_var.get()
        if src is not None:
            return src
        return PluginSource(f"<direct:{getattr(fn, '__module__', None) or '?'}>")

    @classmethod
    @contextlib.contextmanager
    def registering_as(cls, source: PluginSource) -> Iterator[None]:
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
    def register(cls, target: str, fn: Callable[..., Any] | type, type: HookType | str = HookType.AROUND) -> Callable[..., Any] | type:
        """Register ``fn`` as a hook of ``type`` on ``target``; returns ``fn``.

        Raises :class:`HookRegistrationError` (a ``TypeError``) for a class with
        any type but REPLACE, a non-callable, or a hook whose parameters cannot
        fit its type; :class:`HookTargetError` for a malformed target.
        """
        source = cls.current_source(fn)
        who = f"plugin {source}"
        try:
            htype = HookType.coerce(type)
        except ValueError as exc:
            raise HookRegistrationError(f"{who}: {exc}") from None
        is_class = isinstance(fn, builtins_type)
        if is_class and htype is not HookType.REPLACE:
            raise HookRegistrationError(
                f"{who}: {fn.__qualname__} is a class, and only HookType.REPLACE accepts a class "
                f"(got {htype.name} for {target!r}); to hook construction target '{target}.__init__'"
            )
        if not callable(fn):
            raise HookRegistrationError(f"{who}: hook for {target!r} must be callable, got {builtins_type(fn).__name__}")
        if htype in (HookType.AROUND, HookType.AFTER) and not is_class:
            cap = _positional_capacity(fn)
            if cap == 0:
                first = "original_fn" if htype is HookType.AROUND else "result"
                raise HookRegistrationError(
                    f"{who}: {htype.name} hook {getattr(fn, '__qualname__', fn)} for {target!r} takes no positional "
                    f"argument; its first parameter receives {first}"
                )
        name = parse_target(target, who)
        st = cls._state
        with st.lock:
            spec = HookSpec(name.key, fn, htype, source, next(st.seq))
            st.rank.setdefault(source, len(st.rank))
            st.hooks.setdefault(name.key, []).append(spec)
            if name.module_hint:
                st.hints[name.key] = name.module_hint
            if st.eager:  # the target may already be patched: re-compose it now
                failure = cls._apply_pass()
                if failure is not None:
                    st.hooks[name.key].remove(spec)
                    if not st.hooks[name.key]:
                        del st.hooks[name.key]
                    cls._apply_pass()
                    raise failure.error
        return fn

    @classmethod
    def hook(cls, target: str, type: HookType | str = HookType.AROUND) -> Callable[[Any], Any]:
        """Decorator form of :meth:`register`; returns the function or class unchanged."""

        def deco(fn: Any) -> Any:
            cls.register(target, fn, type)
            return fn

        return deco

    @classmethod
    def discard(cls, source: PluginSource, reason: str = "discarded") -> int:
        """Drop every hook ``source`` registered (remembering ``reason``); re-compose targets it had patched."""
        st = cls._state
        with st.lock:
            n = 0
            for key in list(st.hooks):
                keep = [s for s in st.hooks[key] if s.source != source]
                st.skipped.extend((s, reason) for s in st.hooks[key] if s.source == source)
                n += len(st.hooks[key]) - len(keep)
                if keep:
                    st.hooks[key] = keep
                else:
                    del st.hooks[key]
            if n and st.patches:
                cls._apply_locked(frozenset(), None)
            return n

    @classmethod
    def registered(cls, target: str | None = None) -> list[HookSpec]:
        """Registered hooks (of one target, or all), in composition order."""
        st = cls._state
        with st.lock:
            if target is None:
                return [s for key in sorted(st.hooks) for s in cls._ordered(key)]
            key = parse_target(target, "describe").key
            return cls._ordered(key)

    @classmethod
    def _ordered(cls, key: str) -> list[HookSpec]:
        st = cls._state
        return sorted(st.hooks.get(key, ()), key=lambda s: (st.rank[s.source], s.seq))

    # -- application --------------------------------------------------------

    @classmethod
    def apply_hooks(
        cls,
        required_dists: Iterable[str] = (),
        on_failure: Callable[[HookFailure], None] | None = None,
    ) -> list[HookFailure]:
        """Patch every target with its composed chain. Idempotent.

        A target that cannot be resolved or patched fails the plugins whose
        hooks it holds: if one of them belongs to ``required_dists`` every patch
        is undone and :class:`PluginLoadError` is raised; otherwise all hooks
        of those plugins are discarded (no half-applied plugin), ``on_failure``
        is called, and application continues. Returns the optional failures.
        """
        with cls._state.lock:
            return cls._apply_locked(frozenset(d for d in required_dists if d), on_failure)

    @classmethod
    def _apply_locked(cls, required: frozenset[str], on_failure: Callable[[HookFailure], None] | None) -> list[HookFailure]:
        st = cls._state
        failures: list[HookFailure] = []
        while True:
            failure = cls._apply_pass()
            if failure is None:
                break
            bad_required = sorted(str(s) for s in failure.sources if s.dist in required)
            if bad_required:
                cls._restore_locked()
                raise PluginLoadError(
                    f"hooks of {', '.join(bad_required)} could not be applied to {failure.target!r}: "
                    f"{failure.error}. They belong to the selected platform's distribution, so start-up "
                    f"aborts; fix or upgrade that package, or select another platform with {cls._selector_env}."
                ) from failure.error
            failures.append(failure)
            why = f"its plugin's hooks were discarded: target {failure.target!r} failed: {type(failure.error).__name__}: {failure.error}"
            for src in failure.sources:
                for key in list(st.hooks):
                    st.skipped.extend((s, why) for s in st.hooks[key] if s.source == src)
                    st.hooks[key] = [s for s in st.hooks[key] if s.source != src]
                    if not st.hooks[key]:
                        del st.hooks[key]
            if on_failure is not None:
                on_failure(failure)
            else:
                logger.error(
                    "discarding every hook of %s: target %r failed: %s",
                    ", ".join(map(str, failure.sources)), failure.target, failure.error,
                    exc_info=failure.error,
                )
        st.eager = True
        return failures

    @classmethod
    def _apply_pass(cls) -> HookFailure | None:
        """Bring patches in line with registrations; the first failure stops the pass."""
        st = cls._state
        wanted = {key: cls._ordered(key) for key in st.hooks}
        dirty = [k for k in set(wanted) | set(st.patches) if k not in st.patches or st.patches[k].chain != wanted.get(k)]
        if not dirty:
            return None
        if any(st.patches[k].is_class for k in dirty if k in st.patches) or any(
            s.type is HookType.REPLACE and isinstance(s.fn, builtins_type) for k in dirty for s in wanted.get(k, ())
        ):
            cls._restore_locked()  # class swaps move method targets: rebuild everything
            dirty = list(wanted)
        else:
            for key in dirty:
                if key in st.patches:
                    cls._unpatch(st.patches.pop(key))
        order = sorted((k for k in dirty if k in wanted), key=lambda k: (not cls._has_class_replace(wanted[k]), k))
        new: list[_Patch] = []
        for key in order:
            try:
                patch = cls._patch(key, wanted[key])
            except Exception as exc:
                for p in reversed(new):
                    cls._unpatch(p)
                    st.patches.pop(p.key, None)
                specs = getattr(exc, "specs", None) or wanted[key]
                return HookFailure(key, frozenset(s.source for s in specs), exc)
            st.patches[key] = patch
            new.append(patch)
        swaps = [(p.original, p.installed, p.owner, p.name) for p in new if isinstance(p.owner, ModuleType)]
        found = rebind_aliases(swaps)
        for p in new:
            p.aliases = found.get(id(p.original), [])
        return None

    @staticmethod
    def _has_class_replace(specs: list[HookSpec]) -> bool:
        return any(s.type is HookType.REPLACE and isinstance(s.fn, builtins_type) for s in specs)

    @classmethod
    def _patch(cls, key: str, specs: list[HookSpec]) -> _Patch:
        who = ", ".join(sorted({f"plugin {s.source}" for s in specs}))
        res = resolve_target(TargetName(key, cls._state.hints.get(key)), who)
        replaces = [s for s in specs if s.type is HookType.REPLACE]
        layers = [s for s in specs if s.type is not HookType.REPLACE]
        if len(replaces) > 1:
            losers = ", ".join(f"{s.qualname} from {s.source}" for s in replaces[:-1])
            warnings.warn(
                f"{len(replaces)} REPLACE hooks target {key!r}: {replaces[-1].qualname} from "
                f"{replaces[-1].source} wins over {losers}",
                HookConflictWarning,
                stacklevel=2,
            )
        installed = cls._build(key, res, replaces[-1] if replaces else None, layers)
        setattr(res.owner, res.name, installed)
        return _Patch(key, res.owner, res.name, res.own, res.raw, installed, list(specs))

    @classmethod
    def _build(cls, key: str, res: Resolved, replace: HookSpec | None, layers: list[HookSpec]) -> Any:
        raw = res.raw
        if isinstance(raw, builtins_type):
            if layers:
                err = HookApplyError(
                    f"target {key!r} is a class: {', '.join(s.type.name for s in layers)} hooks cannot wrap a class "
                    f"without breaking isinstance(); hook '{key}.__init__' or a method instead, or REPLACE the class"
                )
                err.specs = layers  # type: ignore[attr-defined]
                raise err
            assert replace is not None
            return replace.fn
        if isinstance(raw, (staticmethod, classmethod)):
            func, rewrap = raw.__func__, builtins_type(raw)
        elif isinstance(raw, property):
            func = raw.fget

            def rewrap(f: Any, _p: property = raw) -> property:
                return property(f, _p.fset, _p.fdel, _p.__doc__)
        elif callable(raw):
            func, rewrap = raw, None
        else:
            err = HookApplyError(f"target {key!r} is a {builtins_type(raw).__name__}, not a function, method, property or class")
            err.specs = layers or [replace]  # type: ignore[attr-defined]
            raise err
        core = func
        if replace is not None:
            core = replace.fn
            if isinstance(core, (staticmethod, classmethod)):
                core = core.__func__
            elif isinstance(core, property):
                core = core.fget
        chain = compose(core, layers, target=key, core_spec=replace, on_error=cls._count_failure)
        if chain is not core:
            functools.update_wrapper(chain, func)
            chain.__sglang_hook_target__ = (cls._runtime, key)
        return rewrap(chain) if rewrap is not None else chain

    @classmethod
    def _unpatch(cls, patch: _Patch) -> None:
        restore_aliases(patch.aliases, patch.installed)
        if patch.own:
            setattr(patch.owner, patch.name, patch.original)
        elif patch.owner.__dict__.get(patch.name, _MISSING) is patch.installed:
            delattr(patch.owner, patch.name)

    # -- undo and introspection --------------------------------------------

    @classmethod
    def restore(cls) -> None:
        """Put every original back (rebound aliases included). Registrations stay."""
        with cls._state.lock:
            cls._restore_locked()

    @classmethod
    def _restore_locked(cls) -> None:
        st = cls._state
        for patch in reversed(list(st.patches.values())):
            cls._unpatch(patch)
        st.patches.clear()
        st.eager = False

    @classmethod
    def reset(cls) -> None:
        """Restore every original and forget every registration."""
        st = cls._state
        with st.lock:
            cls._restore_locked()
            st.hooks.clear()
            st.hints.clear()
            st.rank.clear()
            st.skipped.clear()
            st.call_failures.clear()

    @classmethod
    @contextlib.contextmanager
    def isolated(cls) -> Iterator[type[HookRegistryBase]]:
        """A scope for tests: on exit every hooked target and registration is as before."""
        st = cls._state
        with st.lock:
            saved = ({k: list(v) for k, v in st.hooks.items()}, dict(st.hints), dict(st.rank), st.eager, list(st.skipped))
        try:
            yield cls
        finally:
            with st.lock:
                cls._restore_locked()
                hooks, hints, rank, eager, skipped = saved
                st.hooks, st.hints, st.rank, st.skipped = hooks, hints, rank, skipped
                if eager:
                    cls._apply_locked(frozenset(), None)

    @classmethod
    def describe(cls, target: str) -> list[ChainEntry]:
        """The applied chain of ``target`` in call order (outermost first, core last)."""
        key = parse_target(target, "describe").key
        with cls._state.lock:
            patch = cls._state.patches.get(key)
            if patch is None:
                return []
            replaces = [s for s in patch.chain if s.type is HookType.REPLACE]
            out = [cls._entry(s) for s in patch.chain if s.type is not HookType.REPLACE]
            if replaces:
                out.append(cls._entry(replaces[-1], note=f"core; overrides {len(replaces) - 1} other REPLACE" if len(replaces) > 1 else "core"))
            return out

    @staticmethod
    def _entry(s: HookSpec, note: str = "") -> ChainEntry:
        return ChainEntry(s.type, s.qualname, s.source.name, s.source.dist, s.source.version, note)

    @classmethod
    def skipped(cls, target: str | None = None) -> list[tuple[HookSpec, str]]:
        """Hooks that were registered but will not run, with the reason (of one target, or all)."""
        with cls._state.lock:
            found = list(cls._state.skipped)
        if target is None:
            return found
        key = parse_target(target, "describe").key
        return [(s, why) for s, why in found if s.target == key]

    @classmethod
    def _count_failure(cls, spec: HookSpec, exc: BaseException) -> None:
        """Called by a chain when one of its hooks raised (the exception goes on to the caller)."""
        with cls._state.lock:
            key = (spec.target, spec.qualname, spec.source)
            cls._state.call_failures[key] = cls._state.call_failures.get(key, 0) + 1

    @classmethod
    def call_failures(cls) -> list[dict[str, Any]]:
        """Exceptions raised by hooks at call time since start, counted per (target, hook, plugin)."""
        with cls._state.lock:
            items = list(cls._state.call_failures.items())
        return [{"target": t, "hook": q, "plugin": src.name, "dist": src.dist, "count": n} for (t, q, src), n in items]

    @classmethod
    def applied_targets(cls) -> list[str]:
        with cls._state.lock:
            return list(cls._state.patches)

    @classmethod
    def sources(cls) -> list[PluginSource]:
        with cls._state.lock:
            return sorted(cls._state.rank, key=cls._state.rank.__getitem__)


builtins_type = type

__all__ = ["HookConflictWarning", "HookFailure", "HookRegistryBase", "PluginError"]
