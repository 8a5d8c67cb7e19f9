"""Value types of the hook engine."""

from __future__ import annotations

import contextvars
import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple


class HookType(str, enum.Enum):
    """How a hook composes with its target.

    ========  =============================================  ==========================
    type      hook signature                                 effect
    ========  =============================================  ==========================
    BEFORE    ``fn(*args, **kwargs) -> (args, kwargs)|None``  runs first; may rewrite args
    AFTER     ``fn(result, *args, **kwargs) -> new|None``     runs last; may replace result
    AROUND    ``fn(original_fn, *args, **kwargs) -> result``  full control; calls original
    REPLACE   ``fn(*args, **kwargs) -> result`` or a class    replaces the target
    ========  =============================================  ==========================
    """

    BEFORE = "before"
    AFTER = "after"
    AROUND = "around"
    REPLACE = "replace"

    @classmethod
    def coerce(cls, value: HookType | str) -> HookType:
        if isinstance(value, HookType):
            return value
        if isinstance(value, str):
            try:
                return cls(value.lower())
            except ValueError:
                pass
        names = ", ".join(m.name for m in cls)
        raise ValueError(f"unknown hook type {value!r}; use one of HookType.{{{names}}}")


class _NoneResult:
    """Sentinel an AFTER hook returns to set the result to ``None``.

    A plain ``None`` from an AFTER hook means "keep the result", so this is the
    only way to make the wrapped call return ``None``.
    """

    _instance: _NoneResult | None = None

    def __new__(cls) -> _NoneResult:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NONE_RESULT"

    def __reduce__(self) -> str:
        return "NONE_RESULT"


NONE_RESULT = _NoneResult()


class PluginSource(NamedTuple):
    """Who registered a hook: the plugin (entry-point name) and its distribution."""

    name: str
    dist: str | None = None
    version: str | None = None

    def __str__(self) -> str:
        return f"{self.name} ({self.dist})" if self.dist else self.name


def new_source_var(runtime: str) -> contextvars.ContextVar[PluginSource | None]:
    """A context variable holding the plugin whose callback is running."""
    return contextvars.ContextVar(f"{runtime}_current_plugin_source", default=None)


@dataclass(frozen=True)
class HookSpec:
    """One registered hook. ``seq`` is the global registration counter."""

    target: str
    fn: Callable[..., Any] | type
    type: HookType
    source: PluginSource
    seq: int

    @property
    def qualname(self) -> str:
        mod = getattr(self.fn, "__module__", None) or "?"
        name = getattr(self.fn, "__qualname__", None) or repr(self.fn)
        return f"{mod}.{name}"


@dataclass(frozen=True)
class ChainEntry:
    """One link of an applied chain, as :meth:`HookRegistryBase.describe` returns it."""

    type: HookType
    hook: str
    plugin: str
    dist: str | None
    version: str | None
    note: str = ""

    def format(self) -> str:
        dist = f"{self.dist} {self.version}" if self.dist else "no distribution"
        note = f" ({self.note})" if self.note else ""
        return f"{self.type.name} {self.hook} [plugin {self.plugin}, {dist}]{note}"
