"""A process-local hook registry; each runtime subclasses it to get its own state.

Composition (documented in ``docs/plugins.md``, as upstream SGLang composes):
the last REPLACE is the core (a second REPLACE warns naming both); BEFORE
hooks run first in registration order; AROUND hooks nest around the core, the
last registered outermost; AFTER hooks run last in registration order. Class
replacements are applied before function and method targets, so a method
target under a replaced class resolves through the replacement.

The three responsibilities live in their own modules: registration
(:mod:`.registration`), patching (:mod:`.patching`) and the failure policy
(:mod:`.policy`); this class adds the queries and the undo operations.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

from sglang.plugin_core.errors import PluginError
from sglang.plugin_core.hooks.patching import HookConflictWarning, PatchingMixin
from sglang.plugin_core.hooks.policy import FailurePolicyMixin
from sglang.plugin_core.hooks.registration import _UNSET, RegistrationMixin, call_order
from sglang.plugin_core.hooks.state import HookFailure, _State
from sglang.plugin_core.hooks.targets import parse_target
from sglang.plugin_core.hooks.types import ChainEntry, HookSource, HookSpec, HookType, new_source_var


class HookRegistryBase(RegistrationMixin, PatchingMixin, FailurePolicyMixin):
    """Register hooks, apply them to their targets, describe and undo them.

    All methods are classmethods over state owned by the concrete subclass
    (``class HookRegistry(HookRegistryBase, runtime="srt")``). Thread-safe.
    Messages go to the logger of the module that defines the subclass.
    """

    _runtime: ClassVar[str] = "base"
    _selector_env: ClassVar[str] = "SGLANG_PLATFORM"
    _logger: ClassVar[logging.Logger] = logging.getLogger(__name__)

    def __init_subclass__(cls, runtime: str = "", selector_env: str = "SGLANG_PLATFORM", **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._selector_env = selector_env
        cls._logger = logging.getLogger(cls.__module__)
        if runtime:
            cls._runtime = runtime
            cls._state = _State()
            cls._source_var = new_source_var(runtime)

    # -- registration -------------------------------------------------------

    @classmethod
    def register(
        cls,
        target: str,
        fn: Callable[..., Any] | type,
        hook_type: HookType | str = HookType.AFTER,
        *,
        source: HookSource | None = None,
        type: HookType | str | None = None,
    ) -> Callable[..., Any] | type:
        """Register ``fn`` as a hook of ``hook_type`` (default AFTER, as upstream) on ``target``; returns ``fn``.

        ``source`` attributes the hook explicitly; by default it is the plugin
        whose callback is running (``None`` outside any plugin). After the
        first ``apply_hooks()`` the target is re-composed at once. Raises
        :class:`HookRegistrationError` (a ``TypeError``) for a class with any
        type but REPLACE, a non-callable, or a hook whose parameters cannot fit
        its type; :class:`HookTargetError` for a malformed target.
        """
        htype = type if type is not None else hook_type
        st = cls._state
        with st.lock:
            spec = cls._add(target, fn, htype, source if source is not None else _UNSET)
            if st.eager:  # the target may already be patched: re-compose it now
                failure = cls._apply_pass(frozenset(st.pending) - {spec.target})
                if failure is not None and failure.unresolved:
                    cls._apply_locked(frozenset(), None)  # keeps it pending, with the ERROR that says so
                elif failure is not None:
                    cls._remove(spec)
                    cls._apply_pass(frozenset(st.pending))
                    raise failure.error
        return fn

    @classmethod
    def hook(cls, target: str, type: HookType | str = HookType.AFTER, *, hook_type: HookType | str | None = None) -> Callable[[Any], Any]:
        """Decorator form of :meth:`register` (``plugin_hook``); returns the function or class unchanged."""

        def deco(fn: Any) -> Any:
            cls.register(target, fn, hook_type if hook_type is not None else type)
            return fn

        return deco

    # -- queries ------------------------------------------------------------

    @classmethod
    def is_hook_applied(cls, target: str, fn: Any, hook_type: HookType | str | None = None) -> bool:
        """True when ``fn`` itself (identity, not equality) is installed on ``target``, with ``hook_type`` if given.

        False before ``apply_hooks()``, after ``restore()``/``reset()``, while the target is pending, and
        once the hook was discarded. Installed is not the same as called: an outer AROUND may skip it.
        """
        key = parse_target(target, "is_hook_applied").key
        want = HookType.coerce(hook_type) if hook_type is not None else None
        with cls._state.lock:
            patch = cls._state.patches.get(key)
            return patch is not None and any(s.fn is fn and (want is None or s.type is want) for s in patch.chain)

    @classmethod
    def describe(cls, target: str) -> list[ChainEntry]:
        """The applied chain of ``target`` in composition order (outermost first, core last)."""
        key = parse_target(target, "describe").key
        with cls._state.lock:
            patch = cls._state.patches.get(key)
            if patch is None:
                return []
            by_seq = sorted(patch.chain, key=lambda s: s.seq)
            replaces = [s for s in by_seq if s.type is HookType.REPLACE]
            out = [cls._entry(s) for s in call_order(by_seq)]
            if replaces:
                out.append(cls._entry(replaces[-1], note=f"core; overrides {len(replaces) - 1} other REPLACE" if len(replaces) > 1 else "core"))
            return out

    @staticmethod
    def _entry(s: HookSpec, note: str = "") -> ChainEntry:
        if s.source is None:
            return ChainEntry(s.type, s.qualname, f"<direct:{getattr(s.fn, '__module__', None) or '?'}>", None, None, note)
        return ChainEntry(s.type, s.qualname, s.source.plugin_name, s.source.dist_name, s.source.version, note)

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
    def pending(cls) -> list[tuple[HookSpec, str]]:
        """Hooks whose target did not resolve at the last ``apply_hooks()``, with the reason."""
        with cls._state.lock:
            st = cls._state
            return [(s, str(f.error)) for key, f in sorted(st.pending.items()) for s in sorted(st.hooks.get(key, ()), key=lambda s: s.seq)]

    @classmethod
    def call_failures(cls) -> list[dict[str, Any]]:
        """Exceptions raised by hooks at call time since start, counted per (target, hook, plugin)."""
        with cls._state.lock:
            items = list(cls._state.call_failures.items())
        return [{"target": t, "hook": q, "plugin": src.name if src else None, "dist": src.dist if src else None, "count": n}
                for (t, q, src), n in items]

    @classmethod
    def applied_targets(cls) -> list[str]:
        with cls._state.lock:
            return list(cls._state.patches)

    @classmethod
    def sources(cls) -> list[HookSource | None]:
        """Every source that registered a hook, in first-registration order."""
        with cls._state.lock:
            return sorted(cls._state.rank, key=cls._state.rank.__getitem__)

    @classmethod
    def generation(cls) -> int:
        """A counter that changes whenever a patch is installed or removed (cached fast paths compare it)."""
        return cls._state.generation

    # -- undo ---------------------------------------------------------------

    @classmethod
    def reset(cls) -> None:
        """Restore every original and forget every registration."""
        st = cls._state
        with st.lock:
            cls._restore_locked()
            for bag in (st.hooks, st.hints, st.rank, st.pending, st.call_failures):
                bag.clear()
            st.skipped.clear()
            st.warned.clear()

    @classmethod
    @contextlib.contextmanager
    def isolated(cls) -> Iterator[type[HookRegistryBase]]:
        """A scope for tests: on exit every hooked target and registration is as before."""
        st = cls._state
        with st.lock:
            saved = ({k: list(v) for k, v in st.hooks.items()}, dict(st.hints), dict(st.rank), st.eager, list(st.skipped), dict(st.pending))
        try:
            yield cls
        finally:
            with st.lock:
                cls._restore_locked()
                hooks, hints, rank, eager, skipped, pending = saved
                st.hooks, st.hints, st.rank, st.skipped, st.pending = hooks, hints, rank, skipped, pending
                if eager:
                    cls._apply_locked(frozenset(), None)


__all__ = ["HookConflictWarning", "HookFailure", "HookRegistryBase", "PluginError"]
