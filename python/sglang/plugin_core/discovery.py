"""Entry-point discovery shared by both runtimes: metadata only, nothing imported.

Order is deterministic (entry-point name, then distribution name), never the
filesystem listing order, so hook composition is the same on every machine.
"""

from __future__ import annotations

import functools
import os
import re
from importlib import import_module
from importlib.metadata import EntryPoint, entry_points
from typing import Any

PLUGINS_ENV = "SGLANG_PLUGINS"


class EntryPointInfo:
    """One entry point with the distribution that ships it (``None`` if hand-built).

    Distribution metadata is read lazily: explicit selection among many
    installed plugins reads only the selected one's METADATA.
    """

    __slots__ = ("__dict__", "ep", "group", "name", "value")

    def __init__(self, ep: EntryPoint) -> None:
        self.ep, self.group, self.name, self.value = ep, ep.group, ep.name, ep.value

    @functools.cached_property
    def _dist_fields(self) -> tuple[str | None, str | None, str | None]:
        dist = getattr(self.ep, "dist", None)
        if dist is None:
            return None, None, None
        try:
            location = str(dist.locate_file(""))
        except Exception:
            location = None
        return dist.metadata["Name"], dist.version, location

    @property
    def dist(self) -> str | None:
        return self._dist_fields[0]

    @property
    def version(self) -> str | None:
        return self._dist_fields[1]

    @property
    def location(self) -> str | None:
        return self._dist_fields[2]

    @property
    def label(self) -> str:
        """``name`` plus its distribution, for messages."""
        dist = f"{self.dist} {self.version}" if self.dist else "no distribution"
        return f"entry point {self.name!r} ({self.value}) from {dist}"

    def load(self) -> Any:
        return self.ep.load()

    def __repr__(self) -> str:
        return f"EntryPointInfo({self.group}: {self.name} = {self.value})"


def list_entry_points(group: str) -> list[EntryPointInfo]:
    """Every entry point of ``group`` across installed distributions, sorted.

    Sorted by name and value; only entries that tie on both are ordered by
    distribution name (so metadata is read only for those).
    """
    found = sorted((EntryPointInfo(ep) for ep in entry_points(group=group)), key=lambda i: (i.name, i.value))
    keys = [(i.name, i.value) for i in found]
    if len(set(keys)) != len(keys):
        found.sort(key=lambda i: (i.name, i.value, i.dist or ""))
    return found


def normalize_dist_name(name: str) -> str:
    """PEP 503 normalisation: ``My_Plugin`` and ``my-plugin`` are one distribution."""
    return re.sub(r"[-_.]+", "-", name).lower()


def allowed_plugins() -> frozenset[str] | None:
    """The ``SGLANG_PLUGINS`` allow-list; ``None`` means no filter.

    Entries are stripped and empties dropped; unset or empty means no filter.
    """
    raw = os.environ.get(PLUGINS_ENV, "")
    names = frozenset(part.strip() for part in raw.split(",") if part.strip())
    return names or None


def split_qualname(qualname: str) -> tuple[str, str]:
    """Split ``a.b.C`` or ``a.b:C`` into (module, attribute path)."""
    if ":" in qualname:
        module, _, attr = qualname.partition(":")
    else:
        module, _, attr = qualname.rpartition(".")
    if not module or not attr:
        raise ValueError(f"{qualname!r} is not a qualified name of the form 'pkg.mod.Class' or 'pkg.mod:Class'")
    return module, attr


def import_qualname(qualname: str) -> Any:
    """Import the object a qualified class name refers to."""
    module, attr = split_qualname(qualname)
    obj: Any = import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


STRICT_ENV = "SGLANG_PLUGINS_STRICT"


def strict_mode() -> bool:
    """``SGLANG_PLUGINS_STRICT=1``: every plugin failure aborts start-up."""
    return os.environ.get(STRICT_ENV, "").strip().lower() in ("1", "true", "yes", "on")
