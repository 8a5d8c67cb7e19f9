"""``python -m sglang.launch_server --model-path ...``: the same server as ``sglang serve``."""

from __future__ import annotations

import sys

if __name__ == "__main__":
    from sglang.srt.arg_groups.pipeline import select_cpu_engine_from_argv
    from sglang.srt.plugins import load_plugins

    select_cpu_engine_from_argv(sys.argv[1:])  # the CPU engine must be chosen before the platform resolves
    load_plugins()  # before prepare_server_args, as in `sglang serve`
    from sglang.srt.entrypoints.http_server import launch_server
    from sglang.srt.server_args import prepare_server_args

    sys.exit(launch_server(prepare_server_args(sys.argv[1:])))
