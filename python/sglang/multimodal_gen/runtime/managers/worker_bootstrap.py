"""Import-neutral spawn targets of the diffusion runtime's child processes.

Nothing of the diffusion runtime is imported at module scope, and the process
spec holds only stdlib types plus :class:`ServerArgsPayload` (opaque pickled
bytes), so the unpickler that starts a child imports no pipeline or config
module. The scheduler child then runs, in this order::

    die with the parent
    -> initialize_current_platform()     resolve the platform, init_backend()
    -> load_plugins()                    discover callbacks, register hooks only
    -> apply_plugin_hooks()              from here on targets may be imported
    -> materialize ServerArgs
    -> call run_scheduler_process through its module (a REPLACE hook applies)

The HTTP child registers and applies hooks before importing
``runtime.launch_server`` or materializing ``ServerArgs``. The launcher process
(``sglang serve`` for a diffusion model, ``DiffGenerator``) runs
:func:`launcher_bootstrap`: its own hooks, whose manifest every child must match. A child that finds
runtime modules already imported (a script imported them at module scope,
which ``spawn`` re-runs in every child) warns naming them and the script.
"""

from __future__ import annotations

import importlib
import json
import logging
import multiprocessing
import os
import pickle
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sglang.multimodal_gen.runtime.server_args import ServerArgs

logger = logging.getLogger(__name__)

RUNTIME_PREFIX = "sglang.multimodal_gen.runtime"
# Modules of the runtime package that are import-safe by contract.
IMPORT_SAFE = (
    RUNTIME_PREFIX,
    f"{RUNTIME_PREFIX}.platforms",
    f"{RUNTIME_PREFIX}.managers",
    f"{RUNTIME_PREFIX}.managers.worker_bootstrap",
)
SCHEDULER_ENTRY = f"{RUNTIME_PREFIX}.managers.scheduler:run_scheduler_process"
HTTP_ENTRY = f"{RUNTIME_PREFIX}.launch_server:launch_http_server"


@dataclass(frozen=True)
class ServerArgsPayload:
    """``ServerArgs`` as opaque bytes: unpickling the spec does not unpickle them."""

    data: bytes

    @classmethod
    def pack(cls, server_args: ServerArgs) -> ServerArgsPayload:
        return cls(pickle.dumps(server_args, protocol=pickle.HIGHEST_PROTOCOL))

    def materialize(self) -> Any:
        return pickle.loads(self.data)


@dataclass(frozen=True)
class SchedulerProcessSpec:
    """Everything a child needs, in stdlib types (plus the opaque payload)."""

    server_args: ServerArgsPayload
    rank: int = 0
    world_size: int = 1
    entry: str = SCHEDULER_ENTRY
    log_level: str = "info"
    role: str = "scheduler"
    launcher_manifest: str = ""  # JSON; the HTTP child compares its own and the schedulers' with it


def get_spawn_context() -> Any:
    """A local ``spawn`` context, whatever the embedding application set globally."""
    return multiprocessing.get_context("spawn")


def preimported_runtime_modules() -> list[str]:
    """Runtime modules already in ``sys.modules`` that are not import-safe."""
    return sorted(
        m for m in list(sys.modules)
        if (m == RUNTIME_PREFIX or m.startswith(RUNTIME_PREFIX + "."))
        and m not in IMPORT_SAFE
        and not m.startswith(f"{RUNTIME_PREFIX}.platforms.")
    )


def _script_name() -> str:
    main = sys.modules.get("__mp_main__") or sys.modules.get("__main__")
    return str(getattr(main, "__file__", None) or "<interactive>")


def warn_preimported(role: str) -> list[str]:
    found = preimported_runtime_modules()
    if found:
        shown = ", ".join(found[:8]) + (f" and {len(found) - 8} more" if len(found) > 8 else "")
        logger.warning(
            "diffusion %s child (pid %d): runtime modules were imported before platform initialization: %s. "
            "They come from the module scope of %s, which spawn re-runs in every child; hooks can still patch "
            "those modules, but classes and registrations made while importing them are out of reach. Move "
            "those imports under `if __name__ == \"__main__\":` or into the function that uses them "
            "(module scope may import sglang.multimodal_gen's DiffGenerator, envs and runtime.platforms).",
            role, os.getpid(), shown, _script_name(),
        )
    return found


def _setup(spec: SchedulerProcessSpec) -> None:
    from sglang.utils.process import configure_child_logging, die_with_parent

    die_with_parent()
    if spec.role == "scheduler":  # Ctrl-C reaches the whole group: the launcher decides when to stop
        import signal

        signal.signal(signal.SIGINT, signal.SIG_IGN)
    configure_child_logging(spec.log_level, f"diffusion {spec.role} {spec.rank}")
    warn_preimported(spec.role)


def _call_entry(entry: str, *args: Any) -> Any:
    module_name, _, attr = entry.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, attr)(*args)  # through the module: a REPLACE hook applies


def _report_failure(conn: Any, exc: BaseException) -> None:
    try:
        conn.send(("failed", f"{type(exc).__name__}: {exc}"))
    except Exception:
        pass


def scheduler_process_main(spec: SchedulerProcessSpec, conn: Any) -> None:
    """Spawn target of a scheduler child."""
    _setup(spec)
    try:
        from sglang.multimodal_gen.runtime.platforms import initialize_current_platform
        from sglang.multimodal_gen.runtime.platforms.plugins import apply_plugin_hooks, load_plugins

        initialize_current_platform()
        load_plugins()
        apply_plugin_hooks()
        server_args = spec.server_args.materialize()
    except BaseException as exc:
        logger.error("diffusion scheduler start-up failed: %s: %s", type(exc).__name__, exc, exc_info=exc)
        _report_failure(conn, exc)
        sys.exit(1)
    try:
        _call_entry(spec.entry, server_args, spec.rank, conn)
    except BaseException as exc:
        logger.error("diffusion scheduler failed: %s: %s", type(exc).__name__, exc, exc_info=exc)
        _report_failure(conn, exc)
        sys.exit(1)


def launcher_bootstrap() -> None:
    """The start-up order of a process that launches diffusion children (once per process):
    register, then apply the hooks; the platform resolves on the way (the children initialize it)."""
    from sglang.multimodal_gen.runtime.platforms.plugins import apply_plugin_hooks, load_plugins

    load_plugins()
    apply_plugin_hooks()


def http_process_main(spec: SchedulerProcessSpec, conn: Any) -> None:
    """Spawn target of the HTTP child: hooks are applied before the server is imported."""
    _setup(spec)
    launcher_bootstrap()
    expected = json.loads(spec.launcher_manifest) if spec.launcher_manifest else None
    if expected is not None:
        from sglang.multimodal_gen.runtime.platforms.plugins import plugin_manifest
        from sglang.plugin_core.manifest import check_manifest

        check_manifest(f"diffusion http child (pid {os.getpid()})", expected, plugin_manifest(), "diffusion")
    server_args = spec.server_args.materialize()
    _call_entry(spec.entry, server_args, conn, expected)
