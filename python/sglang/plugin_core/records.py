"""What a loader did with each plugin, for logs, diagnostics and ``make run``."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sglang.plugin_core.discovery import EntryPointInfo


@dataclass
class PluginRecord:
    """One general-plugin entry point and its outcome.

    ``status`` is one of: loaded, filtered (not in ``SGLANG_PLUGINS``), excluded
    (another platform's distribution), failed.
    """

    group: str
    name: str
    value: str
    dist: str | None
    version: str | None
    status: str = "pending"
    reason: str = ""
    required: bool = False
    hooks: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, info: EntryPointInfo) -> PluginRecord:
        return cls(info.group, info.name, info.value, info.dist, info.version)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def format(self) -> str:
        dist = f"{self.dist} {self.version}" if self.dist else "no distribution"
        req = ", required by the selected platform" if self.required else ""
        why = f": {self.reason}" if self.reason else ""
        line = f"  - {self.name} [{dist}{req}] {self.status}{why}"
        return "\n".join([line, *(f"      hook {h}" for h in self.hooks)])


def format_records(title: str, records: list[PluginRecord]) -> str:
    if not records:
        return f"{title}: none installed"
    return "\n".join([f"{title}:", *(r.format() for r in records)])
