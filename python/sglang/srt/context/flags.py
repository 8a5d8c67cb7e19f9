"""Runtime flags: state init-time code derives and runtime code reads.

Groups are typed and typo-safe; each leaf is materialized by the subsystem
that owns it. ``override(**kw)`` is transactional (all names checked first) and
restores on exit: the test idiom. A group whose subsystem is not built has no
leaves rather than leaves nothing reads.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass
from typing import Any


class FlagGroup:
    """Base of a flags group: assigning an undeclared leaf raises."""

    def _check(self, name: str) -> None:
        names = [f.name for f in dataclasses.fields(self)]  # type: ignore[arg-type]
        if name not in names:
            close = difflib.get_close_matches(name, names, n=2)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise AttributeError(f"{type(self).__name__} has no flag {name!r}{hint}; declared: {names}")

    def __setattr__(self, name: str, value: Any) -> None:
        self._check(name)
        object.__setattr__(self, name, value)

    def override(self, **kw: Any) -> _FlagOverride:
        """Transactional scoped override: every name is checked before any is set."""
        for k in kw:
            self._check(k)
        return _FlagOverride(self, kw)


class _FlagOverride:
    def __init__(self, group: FlagGroup, kw: dict[str, Any]) -> None:
        self.group, self.kw, self.saved = group, kw, {}

    def __enter__(self) -> FlagGroup:
        self.saved = {k: getattr(self.group, k) for k in self.kw}
        for k, v in self.kw.items():
            setattr(self.group, k, v)
        return self.group

    def __exit__(self, *exc: object) -> None:
        for k, v in self.saved.items():
            setattr(self.group, k, v)


@dataclass
class CaptureFlags(FlagGroup):
    """Device-graph lifecycle; materialized by the graph runner."""

    enabled: bool = False  # the platform supports capture and it is not disabled
    capturing: bool = False  # a capture is in progress (no stream/buffer creation now)


@dataclass
class MoeFlags(FlagGroup):
    """ACTIVE MoE backends. No MoE model is built yet, so no leaf exists yet."""


@dataclass
class DpFlags(FlagGroup):
    """DP-attention runtime flags. DP attention is not built yet, so no leaf exists yet."""


class Flags:
    __slots__ = ("capture", "dp", "moe")

    def __init__(self) -> None:
        self.capture = CaptureFlags()
        self.moe = MoeFlags()
        self.dp = DpFlags()
