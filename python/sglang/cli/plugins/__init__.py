"""``sglang plugins``: doctor, explain, check and new; each takes ``--json``."""

from __future__ import annotations

import argparse
import logging
import sys


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sglang plugins", description="Inspect, check and scaffold SGLang plugins.")
    sub = p.add_subparsers(dest="sub", metavar="COMMAND", required=True)
    d = sub.add_parser("doctor", help="every plugin entry point, what became of it and why; platform decisions; shadowed installs")
    d.add_argument("--json", action="store_true")
    d.add_argument("--url", help="also ask this running server (e.g. http://127.0.0.1:30000) for the hook failures counted since it started")
    d.add_argument("--api-key", help="the server's --api-key, for --url (or set SGLANG_API_KEY)")
    e = sub.add_parser("explain", help="the applied hook chain of one target, in call order, and the hooks skipped")
    e.add_argument("target", help="a hook target, e.g. sglang.srt.managers.scheduler.Scheduler.__init__")
    e.add_argument("--runtime", choices=("auto", "srt", "diffusion"), default="auto", help="whose registry (default: from the target's module)")
    e.add_argument("--json", action="store_true")
    c = sub.add_parser("check", help="conformance kit for one installed distribution (run it in your CI)")
    c.add_argument("dist", help="distribution name, e.g. my-platform-plugin")
    c.add_argument("--json", action="store_true")
    n = sub.add_parser("new", help="scaffold a platform or general plugin package that passes `check`")
    n.add_argument("kind", choices=("platform", "plugin"))
    n.add_argument("name", help="device or plugin name (lower case, e.g. acme)")
    n.add_argument("--out", default=".", help="parent directory of the new package (default: .)")
    n.add_argument("--json", action="store_true")
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s", force=True)
    if args.sub == "doctor":
        from sglang.cli.plugins.doctor import cmd_doctor as cmd
    elif args.sub == "explain":
        from sglang.cli.plugins.explain import cmd_explain as cmd
    elif args.sub == "check":
        from sglang.cli.plugins.check import cmd_check as cmd
    else:
        from sglang.cli.plugins.new import cmd_new as cmd
    try:
        return cmd(args)
    except ValueError as exc:
        print(f"sglang plugins {args.sub}: error: {exc}", file=sys.stderr)
        return 2
