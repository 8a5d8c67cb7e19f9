"""Plugin manifests: what plugins a process loaded and which hook chains it applied.

Every spawned process reports its manifest at the start-up handshake; the
launcher compares it with its own. A difference (a plugin that loaded in one
process and failed or was skipped in another, a hook chain that differs) is a
warning naming the process and the difference, and an error under
``SGLANG_PLUGINS_STRICT=1``.
"""

from __future__ import annotations

import logging
from typing import Any

from sglang.plugin_core.discovery import strict_mode
from sglang.plugin_core.errors import PluginError
from sglang.plugin_core.hooks.registry import HookRegistryBase
from sglang.plugin_core.records import PluginRecord

logger = logging.getLogger(__name__)


class PluginManifestMismatchError(PluginError, RuntimeError):
    """A child process's plugins or hook chains differ from the launcher's (strict mode)."""


def build_manifest(records: list[PluginRecord], registry: type[HookRegistryBase]) -> dict[str, Any]:
    """A picklable, JSON-able summary: plugins (name, dist, version, status) and applied chains."""
    plugins = sorted(
        {f"{r.group}:{r.name}": {"dist": r.dist, "version": r.version, "status": r.status} for r in records}.items()
    )
    hooks = {t: [e.format() for e in registry.describe(t)] for t in sorted(registry.applied_targets())}
    return {"plugins": dict(plugins), "hooks": hooks}


def diff_manifests(expected: dict[str, Any], got: dict[str, Any]) -> list[str]:
    """Human-readable differences of ``got`` from ``expected`` (empty when they agree)."""
    out: list[str] = []
    ep, gp = expected.get("plugins", {}), got.get("plugins", {})
    for key in sorted(set(ep) | set(gp)):
        a, b = ep.get(key), gp.get(key)
        if a == b:
            continue
        if a is None:
            out.append(f"plugin {key} is {b['status']} here but unknown to the launcher")
        elif b is None:
            out.append(f"plugin {key} ({a['status']} in the launcher) is missing here")
        else:
            what = ", ".join(f"{k} {a[k]!r} -> {b[k]!r}" for k in ("dist", "version", "status") if a[k] != b[k])
            out.append(f"plugin {key}: {what}")
    eh, gh = expected.get("hooks", {}), got.get("hooks", {})
    for target in sorted(set(eh) | set(gh)):
        if eh.get(target) != gh.get(target):
            out.append(f"hooks on {target}: launcher {eh.get(target, [])} vs here {gh.get(target, [])}")
    return out


def check_manifest(process: str, expected: dict[str, Any], got: dict[str, Any], runtime: str) -> list[str]:
    """Warn (or raise under ``SGLANG_PLUGINS_STRICT=1``) when ``got`` differs from ``expected``."""
    diff = diff_manifests(expected, got)
    if diff:
        msg = f"{runtime} plugin manifest of {process} differs from the launcher's: " + "; ".join(diff)
        if strict_mode():
            raise PluginManifestMismatchError(msg + ". Start-up aborts because SGLANG_PLUGINS_STRICT=1 is set.")
        logger.warning("%s", msg)
    return diff
