"""Hook target syntax and resolution.

Two spellings name the same target: dotted (``pkg.mod.Cls.meth``) and
entry-point style (``pkg.mod:Cls.meth``, the colon read as a dot). Syntax is
checked at registration; resolution (which imports the target's module) runs
when hooks are applied.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from importlib import import_module
from types import ModuleType
from typing import Any

from sglang.plugin_core.errors import HookTargetError

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass(frozen=True)
class TargetName:
    """A syntactically valid target. ``key`` is the dotted spelling."""

    key: str
    module_hint: str | None  # the explicit module of the entry-point spelling


def parse_target(target: object, who: str) -> TargetName:
    """Validate a target string; ``who`` names the plugin for the message."""
    if not isinstance(target, str) or not target.strip():
        raise HookTargetError(f"hook target {target!r} from {who} must be a non-empty string such as 'pkg.mod.Cls.meth' or 'pkg.mod:func'")
    text = target.strip()
    module_hint = None
    if ":" in text:
        module_hint, _, attr = text.partition(":")
        if not module_hint or not attr or ":" in attr:
            raise HookTargetError(f"hook target {target!r} from {who} is malformed: use 'pkg.mod:Attr.path' with exactly one colon")
        parts = module_hint.split(".") + attr.split(".")
    else:
        parts = text.split(".")
        if len(parts) < 2:
            raise HookTargetError(
                f"hook target {target!r} from {who} has no module: name it fully, e.g. "
                f"'pkg.mod.{text}' or 'pkg.mod:{text}'"
            )
    bad = [p for p in parts if not _IDENT.match(p)]
    if bad:
        raise HookTargetError(f"hook target {target!r} from {who} has invalid name part(s) {bad}: each part must be a Python identifier")
    return TargetName(".".join(parts), module_hint)


@dataclass
class Resolved:
    """Where a target lives. ``raw`` is the attribute as stored (descriptor intact)."""

    owner: Any  # a module or a class
    name: str
    raw: Any
    own: bool  # False when a class inherits the attribute from a base
    module: str

    @property
    def value(self) -> Any:
        return getattr(self.owner, self.name)

    @property
    def owner_is_module(self) -> bool:
        return isinstance(self.owner, ModuleType)


def _import(name: str, target: str, who: str) -> ModuleType | None:
    """Import ``name``; ``None`` when that module does not exist."""
    mod = sys.modules.get(name)
    if mod is not None:
        return mod
    try:
        return import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
            return None
        raise HookTargetError(f"hook target {target!r} from {who}: importing {name!r} failed: {exc}") from exc
    except Exception as exc:
        raise HookTargetError(f"hook target {target!r} from {who}: importing {name!r} raised {type(exc).__name__}: {exc}") from exc


def resolve_target(name: TargetName, who: str) -> Resolved:
    """Import the longest importable module prefix, then walk the attributes."""
    parts = name.key.split(".")
    if name.module_hint is not None:
        n_mod = name.module_hint.count(".") + 1
        module = _import(name.module_hint, name.key, who)
        if module is None:
            raise HookTargetError(f"hook target {name.key!r} from {who}: module {name.module_hint!r} is not installed")
    else:
        module = _import(parts[0], name.key, who)
        if module is None:
            raise HookTargetError(f"hook target {name.key!r} from {who}: module {parts[0]!r} is not installed")
        n_mod = 1
        while n_mod < len(parts) - 1:
            nxt = getattr(module, parts[n_mod], None)
            if nxt is not None and not isinstance(nxt, ModuleType):
                break  # an attribute of the module, not a submodule
            sub = _import(".".join(parts[: n_mod + 1]), name.key, who)
            if sub is None:
                break
            module, n_mod = sub, n_mod + 1
    attrs = parts[n_mod:]
    if not attrs or (len(attrs) == 1 and isinstance(module.__dict__.get(attrs[0]), ModuleType)):
        raise HookTargetError(f"hook target {name.key!r} from {who} names a module; name a function, method or class in it")
    owner: Any = module
    walked = module.__name__
    for part in attrs[:-1]:
        if not hasattr(owner, part):
            raise HookTargetError(f"hook target {name.key!r} from {who}: {walked!r} has no attribute {part!r}; check the spelling against this sglang version")
        owner = getattr(owner, part)
        walked += "." + part
    last = attrs[-1]
    if isinstance(owner, ModuleType):
        if last not in owner.__dict__:
            raise HookTargetError(f"hook target {name.key!r} from {who}: module {walked!r} has no attribute {last!r}; check the spelling against this sglang version")
        return Resolved(owner, last, owner.__dict__[last], True, module.__name__)
    if isinstance(owner, type):
        for klass in owner.__mro__:
            if last in klass.__dict__:
                return Resolved(owner, last, klass.__dict__[last], klass is owner, module.__name__)
        raise HookTargetError(f"hook target {name.key!r} from {who}: class {walked!r} has no attribute {last!r}; check the spelling against this sglang version")
    raise HookTargetError(
        f"hook target {name.key!r} from {who}: {walked!r} is a {type(owner).__name__} instance; "
        "targets must live on a module or a class"
    )
