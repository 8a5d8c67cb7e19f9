"""Call-time hook faults: who raised, and what the host does about it.

A host (the SRT scheduler, the diffusion worker) catches what escapes one
request's work and asks :func:`describe_fault` for the message its client
gets; :func:`fail_fast` says whether to stop instead (``SGLANG_PLUGINS_STRICT=1``
keeps the fail-fast behaviour for exceptions raised by hooks).
"""

from __future__ import annotations

from sglang.plugin_core.discovery import strict_mode
from sglang.plugin_core.hooks.compose import blame_of


def describe_fault(exc: BaseException) -> str:
    """``"ValueError: boom"``, plus the hook, plugin, distribution and target when a hook raised it."""
    text = f"{type(exc).__name__}: {exc}"
    spec = blame_of(exc)
    if spec is not None:
        src = spec.source  # None: registered by code directly, not by a plugin's entry point
        owner = f"plugin {src.name}, distribution {src.dist or 'none'}" if src is not None else "no plugin (registered directly)"
        text += f" (raised by {spec.type.name} hook {spec.qualname} of {owner}, on target {spec.target})"
    return text


hook_of = blame_of  # the hook an exception escaped from, or None


def fail_fast(exc: BaseException) -> bool:
    """True when ``exc`` came from a hook and ``SGLANG_PLUGINS_STRICT=1`` asks to stop on plugin faults."""
    return blame_of(exc) is not None and strict_mode()
