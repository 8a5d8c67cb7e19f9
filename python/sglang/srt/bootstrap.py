"""The SRT start-up order, in one place.

Every entry point that builds ``ServerArgs`` from user input calls
:func:`bootstrap` first: ``sglang serve``, ``python -m sglang.launch_server``
and ``sglang.Engine(...)``; constructing or unpickling a ``ServerArgs`` calls it
too (``ServerArgs.__new__``), so code that builds one directly, and every
spawned child that receives one, gets the same order. The order is what makes plugins work at every
call site:

1. choose the CPU engine for ``--device cpu`` (or ``auto`` with no
   accelerator) *before* the platform resolves;
2. ``load_plugins()``: general plugins register and apply their hooks, so
   hooks on ``ServerArgs.add_cli_args``, ``__post_init__`` and
   ``check_server_args`` run for the ``ServerArgs`` built next.
"""

from __future__ import annotations


def device_from_argv(argv: list[str]) -> str:
    """The ``--device`` of a command line not parsed yet (``auto`` when absent)."""
    device = "auto"
    for i, a in enumerate(argv):
        if a == "--device" and i + 1 < len(argv):
            device = argv[i + 1]
        elif a.startswith("--device="):
            device = a.split("=", 1)[1]
    return device


def choose_engine(device: str = "auto") -> None:
    """Step 1 alone: what the report commands (``sglang plugins doctor/explain``) run before they resolve
    the platform, so they show the decision ``sglang serve`` would make."""
    from sglang.srt.arg_groups.pipeline import select_cpu_engine_early

    select_cpu_engine_early(device)


def bootstrap(device: str = "auto") -> None:
    """Run the start-up order (idempotent: ``load_plugins`` runs once per process)."""
    from sglang.srt.arg_groups.pipeline import select_cpu_engine_early
    from sglang.srt.plugins import load_plugins

    select_cpu_engine_early(device)
    load_plugins()
