"""Value types of the hook engine."""

from __future__ import annotations

import contextvars
import enum
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any


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


@dataclass(frozen=True)
class HookSource:
    """Who registered a hook: the plugin (its entry-point name) and its distribution.

    Equal by value on ``(plugin_name, dist_name)``, as upstream SGLang's; the
    version is carried for reports and does not take part in equality. Hooks
    registered outside any plugin have no source (``HookSpec.source is None``).
    """

    plugin_name: str
    dist_name: str | None = None
    version: str | None = field(default=None, compare=False)

    @property
    def name(self) -> str:
        return self.plugin_name

    @property
    def dist(self) -> str | None:
        return self.dist_name

    def __iter__(self) -> Iterator[str | None]:  # unpacks like upstream's (plugin_name, dist_name) tuple
        return iter((self.plugin_name, self.dist_name))

    def __str__(self) -> str:
        return f"{self.plugin_name} ({self.dist_name})" if self.dist_name else self.plugin_name


PluginSource = HookSource  # this project's earlier name


def source_label(source: HookSource | None, fn: Any = None) -> str:
    """How messages name a hook's owner: the plugin, or the module that registered it directly."""
    if source is not None:
        return f"plugin {source}"
    return f"{getattr(fn, '__module__', None) or '?'} (registered outside a plugin)"


def new_source_var(runtime: str) -> contextvars.ContextVar[HookSource | None]:
    """A context variable holding the plugin whose callback is running."""
    return contextvars.ContextVar(f"{runtime}_current_plugin_source", default=None)


@dataclass(frozen=True)
class HookSpec:
    """One registered hook. ``seq`` is the global registration counter."""

    target: str
    fn: Callable[..., Any] | type
    type: HookType
    source: HookSource | None  # None: registered outside any plugin
    seq: int

    @property
    def owner(self) -> str:
        """The plugin that registered this hook, or the module for a direct registration."""
        return source_label(self.source, self.fn)

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
