"""Patching: bringing the installed chains in line with the registrations.

One pass (:meth:`PatchingMixin._apply_pass`) re-composes every target whose
registrations changed: class replacements first (so a method target under a
replaced class resolves through the replacement), then functions and methods.
A pass is all or nothing: its first failure undoes what it installed and is
returned, attributed to the plugins whose hooks the target holds.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar

from sglang.plugin_core.errors import HookApplyError
from sglang.plugin_core.hooks.aliases import rebind_aliases, restore_aliases
from sglang.plugin_core.hooks.compose import compose
from sglang.plugin_core.hooks.registration import call_order
from sglang.plugin_core.hooks.state import HookFailure, _Patch, _State
from sglang.plugin_core.hooks.targets import Resolved, TargetName, resolve_target
from sglang.plugin_core.hooks.types import HookSpec, HookType

if TYPE_CHECKING:
    import logging

_MISSING = object()


class HookConflictWarning(UserWarning):
    """Two REPLACE hooks target the same thing; the later one wins."""


def _is_class_replace(s: HookSpec) -> bool:
    return s.type is HookType.REPLACE and inspect.isclass(s.fn)


class PatchingMixin:
    """The patching half of a hook registry (state owned by the concrete class)."""

    _state: ClassVar[_State]
    _runtime: ClassVar[str]
    _logger: ClassVar[logging.Logger]

    @classmethod
    def _apply_pass(cls, exclude: frozenset[str] = frozenset()) -> HookFailure | None:
        """Re-compose every changed target but those in ``exclude``; the first failure stops the pass."""
        st = cls._state
        wanted = {key: specs for key, specs in st.hooks.items() if key not in exclude}
        dirty = [k for k in (set(wanted) | set(st.patches)) - exclude if k not in st.patches or st.patches[k].chain != wanted.get(k)]
        if not dirty:
            return None
        st.generation += 1
        if any(st.patches[k].is_class for k in dirty if k in st.patches) or any(_is_class_replace(s) for k in dirty for s in wanted.get(k, ())):
            cls._restore_locked(keep_eager=True)  # class swaps move method targets: rebuild everything
            dirty = list(wanted)
        else:
            for key in dirty:
                if key in st.patches:
                    cls._unpatch(st.patches.pop(key))
        order = sorted((k for k in dirty if k in wanted), key=lambda k: (not any(_is_class_replace(s) for s in wanted[k]), k))
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
        cls._warn_class_overrides(wanted)
        return None

    @classmethod
    def _warn_class_overrides(cls, wanted: dict[str, list[HookSpec]]) -> None:
        """A class REPLACE changes what hooks on that class's methods wrap: say so once per pair."""
        st = cls._state
        for key, specs in wanted.items():
            replaces = [s for s in specs if _is_class_replace(s)]
            if not replaces:
                continue
            for other, hooks in wanted.items():
                if not other.startswith(key + ".") or (key, other) in st.warned:
                    continue
                st.warned.add((key, other))
                rep = replaces[-1]
                names = ", ".join(f"{h.type.name} {h.qualname} from {h.owner}" for h in hooks)
                cls._logger.warning(
                    "REPLACE of class %r by %s from %s will override the class that the hooks on %r were written "
                    "against (%s): they now wrap the replacement's attribute, not the original's",
                    key, rep.qualname, rep.owner, other, names,
                )

    @classmethod
    def _patch(cls, key: str, specs: list[HookSpec]) -> _Patch:
        who = ", ".join(sorted({s.owner for s in specs}))
        res = resolve_target(TargetName(key, cls._state.hints.get(key)), who)
        by_seq = sorted(specs, key=lambda s: s.seq)
        replaces = [s for s in by_seq if s.type is HookType.REPLACE]
        if len(replaces) > 1:
            losers = ", ".join(f"{s.qualname} from {s.owner}" for s in replaces[:-1])
            warnings.warn(
                f"{len(replaces)} REPLACE hooks target {key!r}: {replaces[-1].qualname} from "
                f"{replaces[-1].owner} wins over {losers}",
                HookConflictWarning,
                stacklevel=2,
            )
        installed = cls._build(key, res, replaces[-1] if replaces else None, call_order(by_seq))
        setattr(res.owner, res.name, installed)
        return _Patch(key, res.owner, res.name, res.own, res.raw, installed, list(specs))

    @classmethod
    def _build(cls, key: str, res: Resolved, replace: HookSpec | None, layers: list[HookSpec]) -> Any:
        raw = res.raw
        if inspect.isclass(raw):
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
            func, rewrap = raw.__func__, type(raw)
        elif isinstance(raw, property):
            func = raw.fget

            def rewrap(f: Any, _p: property = raw) -> property:
                return property(f, _p.fset, _p.fdel, _p.__doc__)
        elif callable(raw):
            func, rewrap = raw, None
        else:
            err = HookApplyError(f"target {key!r} is a {type(raw).__name__}, not a function, method, property or class")
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
    def _count_failure(cls, spec: HookSpec, exc: BaseException) -> None:
        """Called by a chain when one of its hooks raised (the exception goes on to the caller)."""
        with cls._state.lock:
            key = (spec.target, spec.qualname, spec.source)
            cls._state.call_failures[key] = cls._state.call_failures.get(key, 0) + 1

    @classmethod
    def _unpatch(cls, patch: _Patch) -> None:
        restore_aliases(patch.aliases, patch.installed)
        if patch.own:
            setattr(patch.owner, patch.name, patch.original)
        elif patch.owner.__dict__.get(patch.name, _MISSING) is patch.installed:
            delattr(patch.owner, patch.name)

    @classmethod
    def restore(cls) -> None:
        """Put every original back (rebound aliases included). Registrations stay."""
        with cls._state.lock:
            cls._restore_locked()

    @classmethod
    def _restore_locked(cls, keep_eager: bool = False) -> None:
        st = cls._state
        if st.patches:
            st.generation += 1
        for patch in reversed(list(st.patches.values())):
            cls._unpatch(patch)
        st.patches.clear()
        if not keep_eager:
            st.eager = False
