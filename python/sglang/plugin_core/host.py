"""One runtime's plugin host: its ``current_platform``, backend start and plugin phases.

A runtime creates one :class:`PlatformHost` from its :class:`Runtime` declaration
and one :class:`PluginHost` over it and its registry class, and exposes their
methods under its documented names (``current_platform``, ``load_plugins``, ...). Each step runs at most
once per process (:class:`OncePerProcess`): a re-entrant call returns at once,
other threads wait and inherit the outcome, a failure is re-raised on every
later call.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

from sglang.plugin_core.lazy_platform import LazyPlatform
from sglang.plugin_core.once import OncePerProcess
from sglang.plugin_core.records import PluginRecord, format_records
from sglang.plugin_core.runtime import Runtime
from sglang.plugin_core.selection import SelectionChain

if TYPE_CHECKING:  # the plugin phases' modules read importlib.metadata: imported when a phase runs
    from sglang.plugin_core.decision import PlatformDecision
    from sglang.plugin_core.hooks.registry import HookRegistryBase
    from sglang.plugin_core.hooks.types import HookSource
    from sglang.plugin_core.loading import Loaded

logger = logging.getLogger(__name__)


class PlatformHost:
    """Platform selection and backend initialization of one runtime.

    ``namespace`` is the globals of the module that exposes ``current_platform``:
    the resolved platform is written there so later reads skip ``__getattr__``.
    """

    def __init__(self, runtime: Runtime, namespace: dict[str, Any]) -> None:
        self.runtime = runtime
        self.chain = SelectionChain(runtime)
        self.lazy = LazyPlatform(runtime.name, self.chain.resolve, namespace)
        self.backend_once = OncePerProcess(f"{runtime.name} init_backend()", self._init_backend)

    # -- the platform -------------------------------------------------------

    def platform(self) -> Any:
        """``current_platform``: resolved on first use, once per process."""
        return self.lazy.get()

    def decision(self) -> PlatformDecision:
        """The record of how ``current_platform`` was chosen (resolving it if needed)."""
        return self.lazy.get_decision()

    def lazy_platform(self) -> LazyPlatform:
        """The object behind ``current_platform`` (its selection state), for the developer kit."""
        return self.lazy

    def is_resolved(self) -> bool:
        return self.lazy.resolved

    def init_backend(self) -> Any:
        """The platform's ``init_backend()``, at most once per process; a failure is terminal."""
        plat = self.backend_once()
        return plat if plat is not None else self.platform()

    def _init_backend(self) -> Any:
        plat = self.platform()
        wrap = self.runtime.errors.backend
        try:
            plat.init_backend()
        except Exception as exc:
            if wrap is None:
                raise
            raise wrap(
                f"init_backend() of {self.runtime.noun} {plat!r} raised {type(exc).__name__}: {exc}; start-up aborts "
                f"and this process does not retry it. Fix the platform package or select another platform with "
                f"{self.runtime.selector_env}."
            ) from exc
        logger.debug("%s backend initialized: %r", self.runtime.name, plat)
        return plat

    def module_getattr(self, module: str, name: str) -> Any:
        """The body of a platform package's ``__getattr__``."""
        if name == "current_platform":
            return self.platform()
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    def selected_dist(self) -> str | None:
        """The distribution of the selected platform (``None``: a built-in).

        With the selector set this reads entry-point metadata only; otherwise
        it resolves ``current_platform`` (which the first start-up step would
        do anyway) and reads the decision.
        """
        rt = self.runtime
        name = os.environ.get(rt.selector_env, "").strip()
        if name and not self.lazy.resolved:
            if name.lower() in rt.override_aliases:
                return None
            from sglang.plugin_core.discovery import list_entry_points

            dists = {i.dist for i in list_entry_points(rt.platform_group) if i.name == name}
            return next(iter(dists)) if len(dists) == 1 else None
        return self.decision().dist



class PluginHost:
    """The general-plugin phases of one runtime: register (run callbacks), then apply (patch)."""

    def __init__(self, platforms: PlatformHost, registry: type[HookRegistryBase]) -> None:
        self.platforms, self.runtime, self.registry = platforms, platforms.runtime, registry
        self.records: list[PluginRecord] = []
        self.sources: dict[HookSource, PluginRecord] = {}
        name = self.runtime.name
        self.register_once = OncePerProcess(f"{name} plugin registration (load_plugins)", self._register)
        self.apply_once = OncePerProcess(f"{name} hook application (apply_plugin_hooks)", self._apply)

    def excluded_dists(self, selected: str | None) -> set[str]:
        """Distributions shipping a platform other than ``selected``'s: their plugins are skipped."""
        from sglang.plugin_core.loading import excluded_for

        return excluded_for(self.runtime.platform_group, selected)

    def load_group(self, group: str, excluded: set[str] | frozenset[str], required: set[str] | frozenset[str]) -> Loaded:
        from sglang.plugin_core.loading import load_group

        return load_group(group, excluded, required, self.records, self.runtime.selector_env)

    def _register(self) -> None:
        selected = self.platforms.selected_dist()
        loaded = self.load_group(self.runtime.plugin_group, self.excluded_dists(selected), {selected} if selected else set())
        from sglang.plugin_core.loading import run_callbacks

        self.sources = run_callbacks(self.registry, loaded, self.runtime.selector_env)

    def _apply(self) -> None:
        from sglang.plugin_core.loading import apply_registry

        self.register_once()
        apply_registry(self.registry, self.sources, self.runtime.selector_env, self.runtime.name)

    def register_plugins(self) -> None:
        """Run every allowed plugin callback (registration only; no target is resolved)."""
        self.register_once()

    def apply_plugins(self) -> None:
        """Register if needed, then resolve and patch every hook target."""
        self.apply_once()

    def plugin_records(self) -> list[PluginRecord]:
        return list(self.records)

    def format_plugin_report(self) -> str:
        return format_records(f"{self.runtime.name} general plugins ({self.runtime.plugin_group})", self.plugin_records())

    def plugin_manifest(self) -> dict[str, Any]:
        """Plugins and applied hook chains of this process (reported at every handshake)."""
        from sglang.plugin_core.manifest import build_manifest

        return build_manifest(self.records, self.registry)
