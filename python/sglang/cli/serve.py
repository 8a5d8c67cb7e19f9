"""``sglang serve``: plugins first, then server args, then the server."""

from __future__ import annotations


def serve(argv: list[str]) -> int:
    """Load plugins *before* preparing server args, so hooks on ``ServerArgs.add_cli_args``,
    ``__post_init__`` and ``check_server_args`` take effect (a plugin can add a flag)."""
    from sglang.srt.arg_groups.pipeline import select_cpu_engine_from_argv
    from sglang.srt.plugins import load_plugins

    select_cpu_engine_from_argv(argv)  # the CPU engine must be chosen before the platform resolves
    load_plugins()
    from sglang.srt.entrypoints.http_server import launch_server
    from sglang.srt.server_args import prepare_server_args

    server_args = prepare_server_args(argv)
    return launch_server(server_args)
