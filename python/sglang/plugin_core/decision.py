"""The record of a platform selection, shared by the SRT and diffusion chains."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Candidate:
    """One platform entry point and what selection made of it."""

    name: str
    value: str
    dist: str | None
    version: str | None
    status: str  # selected | active | inactive | filtered | not-probed
    reason: str = ""


@dataclass
class PlatformDecision:
    """Which rule chose the platform, from which entry point, and why others were not."""

    rule: str
    platform: str  # qualified class name
    entry_point: str | None = None
    dist: str | None = None
    version: str | None = None
    candidates: list[Candidate] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def format(self) -> str:
        src = f" from entry point {self.entry_point!r} ({self.dist} {self.version})" if self.entry_point else ""
        lines = [f"platform: {self.platform}{src}", f"  rule: {self.rule}"]
        for c in self.candidates:
            why = f": {c.reason}" if c.reason else ""
            lines.append(f"  - {c.name} [{c.dist or 'no distribution'}] {c.status}{why}")
        return "\n".join(lines)
