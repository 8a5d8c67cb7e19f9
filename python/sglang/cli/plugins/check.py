"""``sglang plugins check DIST``: the conformance kit a vendor runs in its own CI.

Each platform activation callback runs in a fresh interpreter of its own (so
import safety is judged on a clean module table); the class, contract, hook and
name checks run in one more. One line per check; exit 1 when any fails.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from sglang.cli.plugins.checks import GROUPS, PLATFORM_GROUPS, result

R = dict[str, str]


def _child(args: list[str]) -> tuple[dict[str, Any] | None, str]:
    proc = subprocess.run([sys.executable, "-m", "sglang.cli.plugins.checks", *args], capture_output=True, text=True, timeout=600)
    lines = proc.stdout.strip().splitlines()
    try:
        return json.loads(lines[-1]), proc.stderr
    except (IndexError, json.JSONDecodeError):
        return None, (proc.stderr or proc.stdout)[-2000:]


def run_check(dist: str) -> list[R]:
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        d = distribution(dist)
    except PackageNotFoundError:
        return [result("distribution is installed", "FAIL", f"{dist!r} is not installed in this environment; pip install it first")]
    where = str(d.locate_file(""))
    out = [result("distribution is installed", "PASS", f"{d.metadata['Name']} {d.version} at {where}")]
    eps = sorted((ep for ep in d.entry_points if ep.group in GROUPS), key=lambda e: (e.group, e.name))
    if not eps:
        return [*out, result("ships sglang entry points", "FAIL", f"no entry point in any of {', '.join(GROUPS)}")]
    out.append(result("ships sglang entry points", "PASS", ", ".join(f"{ep.group}:{ep.name}" for ep in eps)))
    qualnames: dict[str, str] = {}
    for ep in eps:
        if ep.group not in PLATFORM_GROUPS:
            continue
        data, err = _child(["activate", ep.group, ep.name, dist])
        if data is None:
            out.append(result(f"{ep.group}:{ep.name}: activation check ran", "FAIL", err))
            continue
        out += data["results"]
        if data["qualname"]:
            qualnames[f"{ep.group}:{ep.name}"] = data["qualname"]
    data, err = _child(["rest", dist, json.dumps(qualnames)])
    if data is None:
        out.append(result("class, contract and hook checks ran", "FAIL", err))
    else:
        out += data["results"]
    return out


def format_results(results: list[R]) -> str:
    lines = [f"{r['status']:<4}  {r['check']}" + (f": {r['detail']}" if r["detail"] else "") for r in results]
    n = {s: sum(r["status"] == s for r in results) for s in ("PASS", "FAIL", "WARN")}
    lines.append(f"{n['PASS']} passed, {n['FAIL']} failed, {n['WARN']} warnings")
    return "\n".join(lines)


def cmd_check(args: Any) -> int:
    results = run_check(args.dist)
    if args.json:
        print(json.dumps({"dist": args.dist, "results": results, "ok": not any(r["status"] == "FAIL" for r in results)}, indent=2))
    else:
        print(format_results(results))
    return 1 if any(r["status"] == "FAIL" for r in results) else 0
