"""``sglang serve``: plugins first, then server args, then the server."""

from __future__ import annotations


def serve(argv: list[str]) -> int:
    """Load plugins *before* preparing server args, so hooks on ``ServerArgs.add_cli_args``,
    ``__post_init__`` and ``check_server_args`` take effect (a plugin can add a flag)."""
    if _is_diffusion(argv):
        return _serve_diffusion(argv)
    from sglang.srt.bootstrap import bootstrap, device_from_argv

    bootstrap(device_from_argv(argv))  # the CPU engine choice, then plugins, before any ServerArgs
    from sglang.srt.entrypoints.http_server import launch_server
    from sglang.srt.server_args import prepare_server_args

    server_args = prepare_server_args(argv)
    return launch_server(server_args)


def _is_diffusion(argv: list[str]) -> bool:
    from sglang.multimodal_gen.runtime.loader.paths import is_diffusion_model_path

    for i, a in enumerate(argv):
        if a == "--model-path" and i + 1 < len(argv):
            return is_diffusion_model_path(argv[i + 1])
        if a.startswith("--model-path="):
            return is_diffusion_model_path(a.split("=", 1)[1])
    return False


def _serve_diffusion(argv: list[str]) -> int:
    """A diffusion model directory: hooks applied here, then scheduler and HTTP children."""
    import argparse
    import logging

    from sglang.multimodal_gen.runtime.platforms.plugins import apply_plugin_hooks

    apply_plugin_hooks()
    from sglang.multimodal_gen.runtime.managers.launcher import launch_diffusion_server
    from sglang.multimodal_gen.runtime.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang serve", description="Serve a diffusion model (OpenAI images API).")
    ServerArgs.add_cli_args(parser)
    server_args = ServerArgs.from_cli_args(parser.parse_args(argv))
    logging.basicConfig(level=getattr(logging, server_args.log_level.upper(), logging.INFO), format="[%(asctime)s] %(levelname)s %(name)s: %(message)s", force=True)
    return launch_diffusion_server(server_args)
