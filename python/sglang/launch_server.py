"""``python -m sglang.launch_server --model-path ...``: the same server as ``sglang serve``."""

from __future__ import annotations

import sys

if __name__ == "__main__":
    from sglang.srt.bootstrap import bootstrap, device_from_argv

    bootstrap(device_from_argv(sys.argv[1:]))  # as `sglang serve`: the CPU engine choice, then plugins, before any ServerArgs
    from sglang.srt.entrypoints.http_server import launch_server
    from sglang.srt.server_args import prepare_server_args

    sys.exit(launch_server(prepare_server_args(sys.argv[1:])))
