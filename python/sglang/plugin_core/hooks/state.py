"""Bookkeeping of a hook registry: applied patches, failures, per-runtime state."""

from __future__ import annotations

import inspect
import itertools
import threading
from dataclasses import dataclass, field
from typing import Any

from sglang.plugin_core.errors import HookTargetError
from sglang.plugin_core.hooks.aliases import Alias
from sglang.plugin_core.hooks.types import HookSource, HookSpec


@dataclass
class _Patch:
    key: str
    owner: Any
    name: str
    own: bool
    original: Any  # the raw attribute before patching
    installed: Any
    chain: list[HookSpec]
    aliases: list[Alias] = field(default_factory=list)

    @property
    def is_class(self) -> bool:
        return isinstance(self.original, type)


@dataclass
class HookFailure:
    """A hook-application failure attributed to the plugins that caused it."""

    target: str
    sources: frozenset[HookSource | None]
    error: BaseException

    @property
    def unresolved(self) -> bool:
        """The target does not import or has no such attribute (yet): the hook can wait for it."""
        return isinstance(self.error, HookTargetError)


class _State:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.hooks: dict[str, list[HookSpec]] = {}
        self.hints: dict[str, str] = {}
        self.rank: dict[HookSource | None, int] = {}  # first-registration order of each source
        self.seq = itertools.count()
        self.patches: dict[str, _Patch] = {}
        self.eager = False  # after the first apply, registrations apply at once
        self.skipped: list[tuple[HookSpec, str]] = []  # discarded hooks and why (for `sglang plugins explain`)
        self.pending: dict[str, HookFailure] = {}  # targets that did not resolve at the last apply
        self.warned: set[tuple[str, str]] = set()  # (class target, method target) pairs already warned about
        self.generation = 0  # changes whenever a patch is installed or removed
        self.call_failures: dict[tuple[str, str, HookSource | None], int] = {}  # hooks that raised when called


def _positional_capacity(fn: Any) -> int | None:
    """How many positional arguments ``fn`` accepts (``None``: unlimited or unknown)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    n = 0
    for p in sig.parameters.values():
        if p.kind is p.VAR_POSITIONAL:
            return None
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            n += 1
    return n
