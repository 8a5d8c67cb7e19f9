"""Rebinding stale ``from x import f`` copies through one reverse index.

When a module-level function or class is patched, other loaded modules may hold
the original object under their own names. One pass over ``sys.modules`` per
apply finds every such alias for all patched objects at once (instead of one
scan of every module per target).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from types import ModuleType
from typing import Any

# (module __dict__, name, value before rebinding)
Alias = tuple[dict, str, Any]


def rebind_aliases(swaps: Iterable[tuple[Any, Any, ModuleType, str]]) -> dict[int, list[Alias]]:
    """Point every alias of each original at its replacement.

    ``swaps`` holds ``(original, replacement, owner_module, attr)``; the owner's
    own attribute is already patched. Returns the rebound aliases keyed by
    ``id(original)`` so they can be restored exactly.
    """
    wanted = {id(orig): (orig, new, owner) for orig, new, owner, _ in swaps}
    found: dict[int, list[Alias]] = {key: [] for key in wanted}
    if not wanted:
        return found
    for mod in list(sys.modules.values()):
        d = getattr(mod, "__dict__", None)
        if not isinstance(d, dict):
            continue
        for name, value in list(d.items()):
            hit = wanted.get(id(value))
            if hit is None or hit[0] is not value:
                continue
            d[name] = hit[1]
            found[id(value)].append((d, name, value))
    return found


def restore_aliases(aliases: Iterable[Alias], installed: Any) -> None:
    """Undo :func:`rebind_aliases` where the alias still holds what we put there."""
    for d, name, old in aliases:
        if d.get(name) is installed:
            d[name] = old
