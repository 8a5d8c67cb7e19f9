"""``sglang`` command: subcommands are registered here and imported lazily."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any


def _cmd_platform(args: argparse.Namespace) -> int:
    """Resolve one runtime's platform, load (and apply) its general plugins, print what happened."""
    if args.runtime == "diffusion":
        from sglang.multimodal_gen.runtime.platforms import get_platform_decision
        from sglang.multimodal_gen.runtime.platforms.plugins import (
            HookRegistry,
            apply_plugin_hooks,
            format_plugin_report,
            load_plugins,
            plugin_records,
        )

        label, decision = "diffusion", get_platform_decision()
        load_plugins()
        apply_plugin_hooks()  # what a diffusion worker does after registering
    else:
        from sglang.srt.bootstrap import choose_engine
        from sglang.srt.platforms import get_platform_decision
        from sglang.srt.plugins import format_plugin_report, load_plugins, plugin_records
        from sglang.srt.plugins.hook_registry import HookRegistry  # type: ignore[assignment]

        choose_engine()  # the decision `sglang serve` would make here (it runs the same step first)
        label, decision = "SRT", get_platform_decision()
        load_plugins()
    targets = HookRegistry.applied_targets()
    kernels = _cpu_kernel_family() if args.runtime != "diffusion" else None
    if args.json:
        out = {
            "runtime": args.runtime,
            "platform": decision.as_dict(),
            **({"cpu_kernel_family": kernels} if kernels else {}),
            "plugins": [r.as_dict() for r in plugin_records()],
            "applied_targets": {t: [e.__dict__ | {"type": e.type.name} for e in HookRegistry.describe(t)] for t in targets},
        }
        print(json.dumps(out, indent=2))
        return 0
    print(f"{label} " + decision.format())
    if kernels:
        print(f"CPU kernel family: {kernels['family'] or 'none'} ({kernels['reason']})")
        if kernels.get("gguf_math"):
            print(f"GGUF kernels (float32 models): {kernels['gguf_math']}")
            if kernels.get("kv_cache_dtype_auto"):
                print(f"KV cache under --kv-cache-dtype auto (float32 models on GGUF blocks): {kernels['kv_cache_dtype_auto']}")
        if kernels.get("weight_prefetch"):
            print(f"weight prefetch of the integer GGUF kernels: {kernels['weight_prefetch']}")
    print(format_plugin_report())
    print(f"applied hook targets: {len(targets)}")
    for t in targets:
        chain = " -> ".join(f"{e.type.name}:{e.hook} [{e.plugin}]" for e in HookRegistry.describe(t))
        print(f"  {t}: {chain}")
    return 0


def _cpu_kernel_family() -> dict[str, Any]:
    """The kernel family the CPU kernels would be built for here and why, the GGUF arithmetic per batch size and the
    weight prefetch (``cpu_kernels/isa.py``; stdlib only)."""
    from sglang.srt.layers.cpu_kernels.isa import (
        IsaError,
        auto_kv_dtype,
        format_prefetch,
        host_choice,
        host_gguf_math,
        host_weight_prefetch,
    )

    try:
        choice = host_choice()
    except IsaError as e:
        return {"family": None, "reason": str(e)}
    out: dict[str, Any] = {"family": choice.family.name, "reason": choice.reason}
    try:
        plan = host_gguf_math(choice.family.name)
    except ValueError as e:  # an unknown SGLANG_CPU_GGUF_MATH: said here as serving would refuse it
        out["gguf_math"] = f"refused: {e}"
    else:
        out |= {"gguf_math": plan.format(), "kv_cache_dtype_auto": auto_kv_dtype(plan)}
    try:
        out["weight_prefetch"] = format_prefetch(host_weight_prefetch(choice.family.name))
    except ValueError as e:  # a malformed SGLANG_CPU_WEIGHT_PREFETCH, likewise
        out["weight_prefetch"] = f"refused: {e}"
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sglang", description="SGLang runtime command line")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("serve", help="serve a model over HTTP (OpenAI-compatible API); `sglang serve --help` lists the flags", add_help=False)
    sub.add_parser("plugins", help="plugin developer kit: doctor, explain, check, new; `sglang plugins --help`", add_help=False)
    sub.add_parser("generate", help="draw images with a diffusion model; `sglang generate --help` lists the flags", add_help=False)
    p = sub.add_parser("platform", help="show the resolved platform and the plugin report of one runtime (SRT by default)")
    p.add_argument("--runtime", choices=("srt", "diffusion"), default="srt", help="which runtime's platform chain and plugins")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_platform)
    return parser


def _clean_errors(command: str, fn: Any, argv: list[str]) -> int:
    try:
        return int(fn(argv) or 0)
    except (ValueError, RuntimeError, OSError) as exc:
        print(f"sglang {command}: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["serve"]:  # every ServerArgs flag belongs to serve: parsed there
        from sglang.cli.serve import serve

        return serve(argv[1:])
    if argv[:1] == ["plugins"]:
        from sglang.cli.plugins import main as plugins_main

        return plugins_main(argv[1:])
    if argv[:1] == ["generate"]:
        from sglang.cli.generate import generate

        return _clean_errors("generate", generate, argv[1:])
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except Exception as exc:  # a clean one-line error for the user, the cause chained
        print(f"sglang {args.command}: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
