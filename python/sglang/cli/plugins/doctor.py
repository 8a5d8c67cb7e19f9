"""``sglang plugins doctor``: every plugin entry point, what became of it, and why.

Resolves both platforms and loads both runtimes' general plugins in this
process, exactly as a server would (the CPU engine is chosen the way
``sglang serve`` chooses it), and reports shadowed or duplicate
``*.dist-info`` directories. Exit 1 when anything failed.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sglang.cli.plugins.checks import GROUPS
from sglang.plugin_core.discovery import normalize_dist_name

if TYPE_CHECKING:
    from sglang.plugin_core.host import PlatformHost


def _sglang_entry_points(info: Path) -> list[str]:
    try:
        text = (info / "entry_points.txt").read_text(errors="replace")
    except OSError:
        return []
    out, group = [], ""
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("["):
            group = line.strip("[]")
        elif "=" in line and group in GROUPS:
            out.append(f"{group}:{line.split('=', 1)[0].strip()}")
    return sorted(out)


def shadowed_distributions() -> list[dict[str, Any]]:
    """Distributions installed more than once on ``sys.path`` whose copies differ (version or
    sglang entry points): the first copy wins and the others are invisible to discovery."""
    seen: dict[str, list[dict[str, str]]] = {}
    for entry in sys.path:
        p = Path(entry or ".")
        if not p.is_dir():
            continue
        for info in sorted(p.glob("*.dist-info")) + sorted(p.glob("*.egg-info")):
            meta = info / ("METADATA" if info.suffix == ".dist-info" else "PKG-INFO")
            name = version = None
            try:
                for line in meta.read_text(errors="replace").splitlines():
                    if line.startswith("Name:"):
                        name = line.split(":", 1)[1].strip()
                    elif line.startswith("Version:"):
                        version = line.split(":", 1)[1].strip()
                    if name and version:
                        break
            except OSError:
                continue
            if name:
                seen.setdefault(normalize_dist_name(name), []).append({"name": name, "version": version or "?", "path": str(info), "entry_points": _sglang_entry_points(info)})
    out = []
    for key, copies in sorted(seen.items()):
        if len(copies) < 2 or all((c["version"], c["entry_points"]) == (copies[0]["version"], copies[0]["entry_points"]) for c in copies):
            continue  # one install, or identical copies (an editable install's build metadata)
        dirs = [str(Path(c["path"]).parent) for c in copies]
        kind = "duplicate in one directory (a broken upgrade?)" if len(set(dirs)) < len(dirs) else "shadowed"
        out.append({"dist": key, "kind": kind, "active": copies[0], "hidden": copies[1:]})
    return out


def _entry_points() -> list[dict[str, Any]]:
    from sglang.plugin_core.discovery import list_entry_points

    return [
        {"group": g, "name": i.name, "value": i.value, "dist": i.dist, "version": i.version, "location": i.location}
        for g in GROUPS for i in list_entry_points(g)
    ]


def _host(runtime: str) -> PlatformHost:
    if runtime == "srt":
        from sglang.srt.platforms import HOST
    else:
        from sglang.multimodal_gen.runtime.platforms import HOST
    return HOST


def _platform(runtime: str) -> dict[str, Any]:
    """The decision of one runtime, or the error and a per-callback probe when selection failed."""
    host = _host(runtime)
    try:
        return {"ok": True, "decision": host.decision().as_dict()}
    except Exception as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}", "probe": _probe(host)}


def _probe(host: PlatformHost) -> list[dict[str, Any]]:
    """Each platform callback on its own, through the runtime's activation step (its checks, its errors)."""
    from sglang.plugin_core.discovery import list_entry_points

    out = []
    for info in list_entry_points(host.runtime.platform_group):
        try:
            q = host.chain.activate(info)
            status, reason = ("active", q) if q else ("inactive", "activate() returned None")
        except Exception as exc:
            cause = exc.__cause__ or exc  # the plugin's own error, not the wrapper
            status, reason = "failed", f"{type(cause).__name__}: {cause}"
        out.append({"name": info.name, "dist": info.dist, "version": info.version, "status": status, "reason": reason})
    return out


def _general(runtime: str) -> dict[str, Any]:
    if runtime == "srt":
        from sglang.srt.plugins import load_plugins as run
        from sglang.srt.plugins import plugin_records
        from sglang.srt.plugins.hook_registry import HookRegistry
    else:
        from sglang.multimodal_gen.runtime.platforms.plugins import HookRegistry, plugin_records
        from sglang.multimodal_gen.runtime.platforms.plugins import apply_plugin_hooks as run
    error = None
    try:
        run()
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    pending = [{"target": s.target, "type": s.type.name, "hook": s.qualname, "owner": s.owner, "reason": why} for s, why in HookRegistry.pending()]
    ok = error is None and not pending and not any(r.status == "failed" for r in plugin_records())
    return {"ok": ok, "error": error, "plugins": [r.as_dict() for r in plugin_records()], "pending": pending}


def diagnose() -> dict[str, Any]:
    from sglang.srt.bootstrap import choose_engine

    choose_engine()  # as `sglang serve` does before the platform resolves
    report: dict[str, Any] = {"python": sys.executable, "entry_points": _entry_points(), "shadowed": shadowed_distributions()}
    report["env"] = {k: v for k, v in sorted(os.environ.items()) if k.startswith("SGLANG_")}
    report["srt_platform"] = _platform("srt")
    report["diffusion_platform"] = _platform("diffusion")
    report["srt_plugins"] = _general("srt")
    report["diffusion_plugins"] = _general("diffusion")
    report["ok"] = all(report[k]["ok"] for k in ("srt_platform", "diffusion_platform", "srt_plugins", "diffusion_plugins"))
    return report


def _fmt_platform(title: str, p: dict[str, Any]) -> list[str]:
    if p["ok"]:
        d = p["decision"]
        src = f" from entry point {d['entry_point']!r} ({d['dist']} {d['version']})" if d["entry_point"] else " (built-in)"
        lines = [f"{title}: {d['platform']}{src}", f"  rule: {d['rule']}"]
        for c in d["candidates"]:
            why = {"inactive": "inactive: activate() returned None", "filtered": "filtered by SGLANG_PLUGINS", "not-probed": f"not probed ({c['reason']} selects another)"}.get(c["status"], c["status"])
            extra = f" -> {c['reason']}" if c["status"] in ("selected", "active") and c["reason"] else ""
            lines.append(f"  - {c['name']} [{c['dist'] or 'no distribution'}] {why}{extra}")
        return lines
    lines = [f"{title}: FAILED: {p['error']}"]
    for c in p["probe"]:
        lines.append(f"  - {c['name']} [{c['dist'] or 'no distribution'} {c['version'] or ''}] {c['status']}: {c['reason']}")
    return lines


def _fmt_plugins(title: str, g: dict[str, Any]) -> list[str]:
    labels = {"filtered": "filtered by SGLANG_PLUGINS", "excluded": "excluded: its distribution ships a platform that is not selected"}
    lines = [f"{title}:" + ("" if g["plugins"] else " none installed")]
    for r in g["plugins"]:
        status = labels.get(r["status"], r["status"])
        why = f": {r['reason']}" if r["reason"] and r["status"] not in labels else ""
        req = " (required by the selected platform)" if r["required"] else ""
        lines.append(f"  - {r['name']} [{r['dist'] or 'no distribution'} {r['version'] or ''}]{req} {status}{why}")
        lines += [f"      hook {h}" for h in r["hooks"]]
    for p in g["pending"]:
        lines.append(f"  pending hook {p['type']} {p['target']} -> {p['hook']} of {p['owner']}: {p['reason']}")
    if g["error"]:
        lines.append(f"  start-up would abort: {g['error']}")
    return lines


def format_report(rep: dict[str, Any]) -> str:
    lines = [f"python: {rep['python']}", "entry points:"]
    for e in rep["entry_points"]:
        lines.append(f"  {e['group']}: {e['name']} = {e['value']} [{e['dist'] or 'no distribution'} {e['version'] or ''} at {e['location']}]")
    if not rep["entry_points"]:
        lines.append("  none")
    lines += _fmt_platform("SRT platform", rep["srt_platform"])
    lines += _fmt_platform("diffusion platform", rep["diffusion_platform"])
    lines += _fmt_plugins("SRT general plugins", rep["srt_plugins"])
    lines += _fmt_plugins("diffusion general plugins", rep["diffusion_plugins"])
    for s in rep["shadowed"]:
        hidden = ", ".join(f"{h['version']} at {h['path']}" for h in s["hidden"])
        lines.append(f"warning: {s['dist']} is installed more than once ({s['kind']}): {s['active']['version']} at {s['active']['path']} wins; hidden: {hidden}")
    lines.append("doctor: all good" if rep["ok"] else "doctor: something failed (see above)")
    return "\n".join(lines)


def server_hook_failures(url: str, api_key: str | None) -> dict[str, Any]:
    """``/get_server_info``'s hook failures of a running server (exceptions hooks raised while serving)."""
    import urllib.error
    import urllib.request

    req = urllib.request.Request(url.rstrip("/") + "/get_server_info")
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            info = json.loads(r.read())
    except (OSError, ValueError, urllib.error.URLError) as exc:
        return {"url": url, "ok": False, "error": f"{type(exc).__name__}: {exc} (is the server up? pass --api-key if it has one)", "hook_failures": []}
    return {"url": url, "ok": True, "error": None, "hook_failures": info.get("hook_failures", [])}


def _fmt_server(srv: dict[str, Any]) -> list[str]:
    if not srv["ok"]:
        return [f"server {srv['url']}: not reachable: {srv['error']}"]
    lines = [f"server {srv['url']}: hook failures since start:" + ("" if srv["hook_failures"] else " none")]
    for f in srv["hook_failures"]:
        lines.append(f"  - {f['count']}x {f['hook']} on {f['target']} [plugin {f['plugin']}, {f['dist'] or 'no distribution'}] in the {f['process']}")
    return lines


def cmd_doctor(args: Any) -> int:
    rep = diagnose()
    if getattr(args, "url", None):
        rep["server"] = server_hook_failures(args.url, args.api_key or os.environ.get("SGLANG_API_KEY"))
        rep["ok"] = rep["ok"] and rep["server"]["ok"]
    if args.json:
        print(json.dumps(rep, indent=2, default=str))
    else:
        text = format_report(rep)
        if "server" in rep:
            head, _, last = text.rpartition("\n")
            text = "\n".join([head, *_fmt_server(rep["server"]), last])
        print(text)
    return 0 if rep["ok"] else 1
