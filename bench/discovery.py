"""Time to resolve ``current_platform`` with 50 installed platform plugins.

Run: .venv/bin/python bench/discovery.py

Each measurement is a fresh interpreter (discovery is once per process). The
baseline is a bare ``importlib.metadata.entry_points(group=...)`` in the same
setting, the floor any entry-point based discovery pays.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from helpers.dists import make_dist

N_PLUGINS = 50
RUNS = 7

BASELINE = """
import time, json
t0 = time.perf_counter()
from importlib.metadata import entry_points
eps = list(entry_points(group="sglang.srt.platforms"))
print(json.dumps({"ms": (time.perf_counter() - t0) * 1e3, "n": len(eps)}))
"""

RESOLVE = """
import time, json, sys
t0 = time.perf_counter()
from sglang.srt.platforms import current_platform, get_platform_decision
current_platform
ms = (time.perf_counter() - t0) * 1e3
mods = sorted(m for m in sys.modules if m.startswith("bench_plat_"))
print(json.dumps({"ms": ms, "imported": mods, "platform": type(current_platform).__name__}))
"""


def build(root: Path) -> None:
    for i in range(N_PLUGINS):
        pkg = f"bench_plat_{i:02d}"
        active = i == 17  # exactly one has its hardware present
        make_dist(
            root,
            f"bench-plat-{i:02d}",
            entry_points={"sglang.srt.platforms": {f"plat{i:02d}": f"{pkg}:activate"}},
            files={
                f"{pkg}/__init__.py": f"def activate():\n    return {repr(pkg + '.p.P') if active else None}\n",
                f"{pkg}/p.py": "from sglang.srt.platforms.interface import SRTPlatform\nclass P(SRTPlatform):\n    pass\n",
            },
        )


def run(code: str, root: Path, **env: str) -> list[dict]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_")}
    e.update(env, PYTHONPATH=str(root))
    out = []
    for _ in range(RUNS):
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e, check=True)
        out.append(json.loads(proc.stdout))
    return out


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        build(root)
        base = run(BASELINE, root)
        explicit = run(RESOLVE, root, SGLANG_PLATFORM="plat17")
        auto = run(RESOLVE, root)
    med = {name: statistics.median(r["ms"] for r in rows) for name, rows in (("entry_points() baseline", base), ("explicit SGLANG_PLATFORM=plat17", explicit), ("auto-discovery", auto))}
    print(f"{N_PLUGINS} installed platform plugins, median of {RUNS} fresh interpreters")
    for name, ms in med.items():
        print(f"  {name:<34} {ms:7.1f} ms")
    print(f"  explicit imported plugin modules: {explicit[0]['imported']} (platform {explicit[0]['platform']})")
    print(f"  auto imported plugin modules:     {len(auto[0]['imported'])} (platform {auto[0]['platform']})")
    assert explicit[0]["imported"] == ["bench_plat_17", "bench_plat_17.p"], "explicit selection must import exactly one plugin"
    print(f"explicit / baseline: {med['explicit SGLANG_PLATFORM=plat17'] / med['entry_points() baseline']:.2f}x")
    print(f"auto / baseline:     {med['auto-discovery'] / med['entry_points() baseline']:.2f}x")


if __name__ == "__main__":
    main()
