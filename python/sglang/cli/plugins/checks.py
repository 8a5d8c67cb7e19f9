"""The conformance checks of ``sglang plugins check DIST``; each runs in a fresh interpreter.

    python -m sglang.cli.plugins.checks activate GROUP NAME DIST   # one platform callback, import safety
    python -m sglang.cli.plugins.checks rest DIST QUALNAMES_JSON     # classes, contract, hooks, names

Each prints a JSON list of ``{"check", "status" (PASS/FAIL/WARN), "detail"}``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

GROUPS = ("sglang.srt.platforms", "sglang.srt.plugins", "sglang.multimodal_gen.platforms", "sglang.multimodal_gen.plugins")
PLATFORM_GROUPS = GROUPS[0::2]
# What an activation callback may import of sglang without touching the runtime.
SAFE_PREFIXES = ("sglang.srt.platforms", "sglang.plugin_core", "sglang.multimodal_gen.runtime.platforms", "sglang.utils")
SAFE_MODULES = ("sglang", "sglang.srt", "sglang.host", "sglang.multimodal_gen", "sglang.multimodal_gen.runtime", "sglang.multimodal_gen.envs")


def result(check: str, status: str, detail: str = "") -> dict[str, str]:
    return {"check": check, "status": status, "detail": detail}


def _entry_point(group: str, name: str, dist: str) -> Any:
    from importlib.metadata import distribution

    for ep in distribution(dist).entry_points:
        if ep.group == group and ep.name == name:
            return ep
    raise LookupError(f"{dist} has no entry point {name!r} in {group!r}")


_PLATFORM_MODULES = (("sglang.srt.platforms", "SRT"), ("sglang.multimodal_gen.runtime.platforms", "diffusion"))


class _TouchedPlatform(RuntimeError):
    """Raised into an activation callback that reads ``current_platform``."""


def _guard_platforms() -> None:
    """Make any selection during the callback fail (and be recorded) instead of running."""
    import importlib

    for mod, label in _PLATFORM_MODULES:
        m = importlib.import_module(mod)

        def chain(label: str = label) -> Any:
            raise _TouchedPlatform(f"the activation callback read the {label} current_platform")

        m.lazy_platform().guard(chain)


def _touched_platforms() -> list[str]:
    return [label for mod, label in _PLATFORM_MODULES if isinstance(sys.modules[mod].lazy_platform().error, _TouchedPlatform)]


def check_activation(group: str, name: str, dist: str) -> tuple[list[dict[str, str]], str | None]:
    """Load one platform entry point and call it with nothing else imported; returns (results, qualname)."""
    label = f"{group}:{name}"
    _guard_platforms()
    before = set(sys.modules)
    try:
        fn = _entry_point(group, name, dist).load()
        qualname = fn()
    except Exception as exc:
        if _touched_platforms():
            return [result(f"{label}: activation callback is import-safe", "FAIL", f"touched current_platform ({', '.join(_touched_platforms())})")], None
        return [result(f"{label}: activation callback runs", "FAIL", f"{type(exc).__name__}: {exc}")], None
    new = sorted(set(sys.modules) - before)
    runtime = [m for m in new if m.startswith("sglang.") and m not in SAFE_MODULES and not m.startswith(SAFE_PREFIXES)]
    problems = []
    if runtime:
        shown = ", ".join(sorted(runtime, key=lambda m: (m.count("."), m))[:4])
        problems.append(f"imported the runtime ({len(runtime)} modules: {shown}, ...)")
    if _touched_platforms():
        problems.append(f"touched current_platform ({', '.join(_touched_platforms())})")
    torch = sys.modules.get("torch")
    if torch is not None and "torch" in new and getattr(torch, "cuda", None) is not None and torch.cuda.is_initialized():
        problems.append("initialized a CUDA device")
    out = [result(f"{label}: activation callback is import-safe", "FAIL" if problems else "PASS", "; ".join(problems) or "imports nothing of the runtime, resolves no platform, initializes no device")]
    if qualname is None:
        out.append(result(f"{label}: activation callback returns a class", "WARN", "returned None (hardware not available here): class checks skipped"))
    elif not isinstance(qualname, str) or not qualname.strip():
        out.append(result(f"{label}: activation callback returns a class", "FAIL", f"returned {qualname!r}; return 'pkg.module.Class' or None"))
        qualname = None
    else:
        out.append(result(f"{label}: activation callback returns a class", "PASS", qualname))
    return out, qualname


def main(argv: list[str]) -> int:
    if argv[0] == "activate":
        res, qualname = check_activation(argv[1], argv[2], argv[3])
        print(json.dumps({"results": res, "qualname": qualname}))
        return 0
    if argv[0] == "rest":
        from sglang.cli.plugins.conformance import check_rest

        print(json.dumps({"results": check_rest(argv[1], json.loads(argv[2]))}))
        return 0
    raise SystemExit(f"unknown mode {argv[0]!r}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
