"""``sglang plugins explain TARGET``: the applied hook chain of one target, and what was skipped."""

from __future__ import annotations

import json
from typing import Any


def _registry(runtime: str) -> tuple[Any, Any, Any]:
    if runtime == "srt":
        from sglang.srt.plugins import load_plugins, plugin_records
        from sglang.srt.plugins.hook_registry import HookRegistry

        return HookRegistry, load_plugins, plugin_records
    from sglang.multimodal_gen.runtime.platforms.plugins import HookRegistry, apply_plugin_hooks, plugin_records

    return HookRegistry, apply_plugin_hooks, plugin_records


def explain(target: str, runtime: str) -> dict[str, Any]:
    if runtime == "auto":
        runtime = "diffusion" if target.startswith("sglang.multimodal_gen") else "srt"
    if runtime == "srt":
        from sglang.srt.bootstrap import choose_engine

        choose_engine()
    registry, load, records = _registry(runtime)
    error = None
    try:
        load()
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    chain = [e.__dict__ | {"type": e.type.name} for e in registry.describe(target)]
    skipped = [
        {"type": s.type.name, "hook": s.qualname, "plugin": s.source.name, "dist": s.source.dist, "version": s.source.version, "why": why}
        for s, why in registry.skipped(target)
    ]
    replaces = [s for s in registry.registered(target) if s.type.name == "REPLACE"]
    for s in replaces[:-1]:
        skipped.append({"type": "REPLACE", "hook": s.qualname, "plugin": s.source.name, "dist": s.source.dist, "version": s.source.version,
                        "why": f"overridden by the later REPLACE {replaces[-1].qualname} from {replaces[-1].source}"})
    not_run = [r.as_dict() for r in records() if r.status in ("filtered", "excluded")]
    return {"target": target, "runtime": runtime, "error": error, "chain": chain, "skipped": skipped, "plugins_not_run": not_run}


def format_explain(rep: dict[str, Any]) -> str:
    lines = [f"target: {rep['target']} ({rep['runtime']})"]
    if rep["error"]:
        lines.append(f"plugin loading failed: {rep['error']}")
    if rep["chain"]:
        lines.append("applied chain, in call order (outermost first):")
        for i, e in enumerate(rep["chain"], 1):
            dist = f"{e['dist']} {e['version']}" if e["dist"] else "no distribution"
            note = f" ({e['note']})" if e["note"] else ""
            lines.append(f"  {i}. {e['type']:<7} {e['hook']}  [plugin {e['plugin']}, {dist}]{note}")
        if not any(e["type"] == "REPLACE" for e in rep["chain"]):
            lines.append(f"  {len(rep['chain']) + 1}. the original {rep['target']}")
    else:
        lines.append("no hook is applied to this target")
    if rep["skipped"]:
        lines.append("registered but skipped:")
        for s in rep["skipped"]:
            lines.append(f"  - {s['type']} {s['hook']} [plugin {s['plugin']}, {s['dist'] or 'no distribution'}]: {s['why']}")
    for r in rep["plugins_not_run"]:
        why = "filtered by SGLANG_PLUGINS" if r["status"] == "filtered" else "excluded: its distribution ships a platform that is not selected"
        lines.append(f"plugin {r['name']} [{r['dist'] or 'no distribution'}] did not run ({why}); hooks it would register are not known")
    return "\n".join(lines)


def cmd_explain(args: Any) -> int:
    rep = explain(args.target, args.runtime)
    print(json.dumps(rep, indent=2, default=str) if args.json else format_explain(rep))
    return 1 if rep["error"] else 0
