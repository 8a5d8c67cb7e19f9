"""Per-role namespace auditing and enforcement (``SGLANG_ROLE_NAMESPACES``).

- ``off`` (default): nothing is observed.
- ``record``: every (role, namespace) pair a process reads is appended once as
  ``"{role} {ns}"`` to ``SGLANG_ROLE_NAMESPACES_OUT``. Reads inside
  torch.compile tracing are not observed: audit with compilation disabled.
- ``enforce``: a read outside ``ROLE_NAMESPACE_SETS[role]`` fails closed
  (``None`` = the full tree; only audited roles are restricted).
"""

from __future__ import annotations

import os
import sys

MODE_ENV = "SGLANG_ROLE_NAMESPACES"
OUT_ENV = "SGLANG_ROLE_NAMESPACES_OUT"
MODES = ("off", "record", "enforce")

# role -> namespaces its processes may read; None: the full tree.
ROLE_NAMESPACE_SETS: dict[str, frozenset[str] | None] = {
    "launcher": None,
    "scheduler": None,
    "tokenizer": None,
    "detokenizer": frozenset(),  # never publishes, so never reads a bag
}


class RoleNamespaceError(RuntimeError):
    pass


def read_mode() -> str:
    raw = os.environ.get(MODE_ENV, "off").strip().lower() or "off"
    if raw not in MODES:
        raise ValueError(f"{MODE_ENV}={raw!r} is not one of {', '.join(MODES)}; unset it or pick one of those")
    return raw


class RoleAudit:
    """Observes namespace reads of the published role. ``active`` is False in ``off`` mode."""

    def __init__(self) -> None:
        self.active = False
        self.mode = "off"
        self.role: str | None = None
        self.seen: set[str] = set()

    def configure(self, mode: str, role: str | None) -> None:
        self.mode, self.role, self.seen = mode, role, set()
        self.active = mode != "off"

    def observe(self, ns: str) -> None:
        torch = sys.modules.get("torch")
        if torch is not None and torch.compiler.is_compiling():
            return  # traced reads are invisible to the audit (documented)
        role = self.role or "unknown"
        if self.mode == "record":
            if ns not in self.seen:
                self.seen.add(ns)
                out = os.environ.get(OUT_ENV)
                if out:
                    with open(out, "a") as f:
                        f.write(f"{role} {ns}\n")
        elif self.mode == "enforce":
            allowed = ROLE_NAMESPACE_SETS.get(role)
            if allowed is not None and ns not in allowed:
                raise RoleNamespaceError(
                    f"role {role!r} read namespace {ns!r}, which ROLE_NAMESPACE_SETS[{role!r}] does not allow "
                    f"({sorted(allowed)}); audit with {MODE_ENV}=record and extend the set, or move the read"
                )
