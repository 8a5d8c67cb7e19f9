"""The declaration of a runtime that hosts plugins: the one thing each runtime writes.

``plugin_core`` builds everything else from it, once for both runtimes: the
platform selection chain (:mod:`.selection`), the lazy ``current_platform`` and
the once-only load/apply phases (:mod:`.host`). A runtime's ``platforms`` and
``plugins`` packages are its declaration plus its platform classes.

``plugin_core`` never imports a runtime: the declaration hands it the platform
base class, the built-ins and the fallback rule as values and callables.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class SelectionErrors:
    """The runtime's error classes for each way selection fails."""

    selection: type[Exception]  # the selector names nothing, or several are active
    activation: type[Exception]  # an entry point fails to import, raises, or returns garbage
    class_: type[Exception]  # the named class does not import, is not a platform, or cannot be built
    unavailable: type[Exception]  # the explicitly selected platform reports no hardware
    backend: type[Exception] | None = None  # init_backend() raised (None: the exception goes through as is)


@dataclass(frozen=True)
class Runtime:
    """How one runtime finds its platform and its general plugins.

    Invariants: ``name`` is unique per process (it keys the registry state and
    the logs); ``fallback`` never raises for a machine without accelerators;
    every name in ``override_aliases`` is a key of ``builtins()``.
    """

    name: str  # "SRT", "diffusion": logs, errors, the manifest
    noun: str  # how errors call one platform: "platform", "diffusion platform"
    platform_group: str  # entry-point group of platform plugins
    plugin_group: str  # entry-point group of general (hook) plugins
    selector_env: str  # the variable naming a platform explicitly
    base: type  # every platform class must subclass it
    base_path: str  # where users import ``base`` from (named in errors)
    errors: SelectionErrors
    # (class, rule) when no plugin is active; may import torch
    fallback: Callable[[], tuple[type, str]]
    # built-in platform classes by lower-case name (imported on call)
    builtins: Callable[[], Mapping[str, type]] = dict
    # built-ins the selector may name: selected without probing, no entry point read
    override_aliases: tuple[str, ...] = ()
    # names the selector may not force, with the reason
    refused: Mapping[str, str] = field(default_factory=dict)
    selector_rule: str = "explicit"  # the decision's rule prefix for the selector
    # SGLANG_PLUGINS filters platform entry points too (SRT), not only hook plugins
    filter_platforms: bool = True
    # duplicate names and names of built-ins are rejected before anything is imported
    strict_names: bool = False
    # extra checks on an external class: a problem ("must set ...") or None
    check_class: Callable[[type], str | None] | None = None

    def describe(self) -> dict[str, Any]:
        """What a report command shows of the declaration."""
        return {
            "runtime": self.name,
            "platform_group": self.platform_group,
            "plugin_group": self.plugin_group,
            "selector_env": self.selector_env,
            "base": self.base_path,
        }
