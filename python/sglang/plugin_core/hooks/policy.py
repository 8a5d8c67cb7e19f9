"""The failure policy of applying hooks: pending, discarded, or fatal.

When a target fails at apply time:

- it does not resolve (its module does not import, the attribute does not
  exist yet): the hooks stay **pending**, an ERROR names the target and the
  plugin, and a later ``apply_hooks()`` applies them once the target exists;
- it resolves but cannot take the hooks (an AROUND on a class, a non-callable):
  every hook of the plugins involved is **discarded**, so no plugin is left
  half-applied;
- either way, when a plugin involved belongs to a *required* distribution (the
  selected platform's), or ``SGLANG_PLUGINS_STRICT=1`` is set, every patch is
  undone and :class:`PluginLoadError` aborts start-up.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import ClassVar

from sglang.plugin_core.discovery import strict_mode
from sglang.plugin_core.errors import PluginLoadError
from sglang.plugin_core.hooks.state import HookFailure, _State

_PENDING_FIX = "it is applied by a later apply_hooks() once the target exists (SGLANG_PLUGINS_STRICT=1 makes this a start-up error)"


class FailurePolicyMixin:
    """``apply_hooks`` and the decisions it makes about failures (state owned by the concrete class)."""

    _state: ClassVar[_State]
    _selector_env: ClassVar[str]
    _logger: ClassVar[logging.Logger]

    @classmethod
    def apply_hooks(
        cls,
        required_dists: Iterable[str] = (),
        on_failure: Callable[[HookFailure], None] | None = None,
    ) -> list[HookFailure]:
        """Patch every target with its composed chain; idempotent, and retries pending targets.

        ``on_failure`` is called for each failure that discarded hooks (it is
        logged when not given). Returns the failures of this call: discarded
        ones and targets left pending.
        """
        with cls._state.lock:
            return cls._apply_locked(frozenset(d for d in required_dists if d), on_failure)

    @classmethod
    def _apply_locked(cls, required: frozenset[str], on_failure: Callable[[HookFailure], None] | None) -> list[HookFailure]:
        st = cls._state
        failures: list[HookFailure] = []
        pending: dict[str, HookFailure] = {}
        while True:
            failure = cls._apply_pass(frozenset(pending))  # type: ignore[attr-defined]
            if failure is None:
                break
            failures.append(failure)
            cls._abort_if_required(failure, required)
            if failure.unresolved:
                pending[failure.target] = failure
                continue
            cls._discard_sources(failure)
            if on_failure is not None:
                on_failure(failure)
            else:
                cls._logger.error(
                    "discarding every hook of %s: target %r failed: %s",
                    ", ".join(map(str, failure.sources)), failure.target, failure.error,
                    exc_info=failure.error,
                )
        for key, failure in pending.items():
            if key not in st.pending or str(st.pending[key].error) != str(failure.error):
                owners = ", ".join(sorted({s.owner for s in st.hooks.get(key, ())}))
                cls._logger.error("hook target %r of %s does not resolve: %s; the hook stays pending and %s", key, owners, failure.error, _PENDING_FIX)
        st.pending = pending
        st.eager = True
        return failures

    @classmethod
    def _abort_if_required(cls, failure: HookFailure, required: frozenset[str]) -> None:
        bad = sorted(str(s) for s in failure.sources if s is not None and s.dist in required)
        strict = strict_mode()
        if not bad and not strict:
            return
        cls._restore_locked()  # type: ignore[attr-defined]
        owners = ", ".join(bad) or ", ".join(sorted({s.owner for s in cls._state.hooks.get(failure.target, ())}))
        why = ("They belong to the selected platform's distribution, so start-up aborts; fix or upgrade that package, "
               f"or select another platform with {cls._selector_env}.") if bad else "SGLANG_PLUGINS_STRICT=1 is set, so start-up aborts."
        raise PluginLoadError(f"hooks of {owners} could not be applied to {failure.target!r}: {failure.error}. {why}") from failure.error

    @classmethod
    def _discard_sources(cls, failure: HookFailure) -> None:
        why = f"its plugin's hooks were discarded: target {failure.target!r} failed: {type(failure.error).__name__}: {failure.error}"
        for src in failure.sources:
            # hooks registered outside a plugin have no plugin to take down with them: only this target's go
            cls._drop(src, why, None if src is not None else failure.target)  # type: ignore[attr-defined]
