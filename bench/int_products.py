"""The integer GGUF products alone, per row count: one or more sources of the CPU kernels side by side.

Run: .venv/bin/python bench/int_products.py SOURCE.cpp[,OTHER.cpp ...] [--threads 1] [--rows 1,2,4,8,16,64]

Each source is built as the engine builds it (``cpu_kernels/build.py``, cached) and loaded as its own module. For
the default model's ``gate_up`` (576 -> 3072) and ``down`` (1536 -> 576) shapes, random Q4 blocks repacked as the
engine repacks them, it times ``q4_linear_i8`` and ``q4_linear_i16`` at each row count, the sources alternating
call after call (so a machine whose speed drifts slows them alike), and prints the fastest of 15 rounds in
nanoseconds per block of 8 outputs x 32 inputs per row. At these sizes the weights sit in L3, not DRAM: this
isolates the instructions a kernel issues, not its streaming (``bench/kernel_ab.py`` times whole steps). The
sources must compute the same bits; the script checks it.

e.g. the committed kernels against an edited copy:
    cp -r python/sglang/srt/layers/cpu_kernels/csrc /tmp/new && $EDITOR /tmp/new/int8_linear.h
    .venv/bin/python bench/int_products.py python/sglang/srt/layers/cpu_kernels/csrc/decode_step.cpp,/tmp/new/decode_step.cpp
"""

from __future__ import annotations

import argparse
import importlib.util
import time
from pathlib import Path
from types import ModuleType

SHAPES = {"gate_up": (3072, 576), "down": (576, 1536)}  # (N outputs, K inputs)


def _load(source: str, tag: str) -> ModuleType:
    from sglang.srt.layers.cpu_kernels.build import build

    so = build(Path(source), f"sglang_int_products_{tag}")  # the module name is the file stem, so each differs
    spec = importlib.util.spec_from_file_location(so.name.split(".")[0], so)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sources", help="comma-separated decode_step.cpp paths")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rows", default="1,2,4,8,16,64")
    args = ap.parse_args()
    import torch

    from sglang.srt.layers.q4_packed import pack_i8

    torch.set_num_threads(args.threads)
    mods = [_load(s, f"v{i}") for i, s in enumerate(args.sources.split(","))]
    torch.manual_seed(0)
    print(f"ns a block-row (8 outputs x 32 inputs), fastest of 15 rounds, {args.threads} thread(s); sources in order")
    for name, (n, k) in SHAPES.items():
        q = torch.randint(0, 16, (n, k), dtype=torch.uint8)
        scale = (torch.rand(n, k // 32) * 0.01).half().float()  # float16 values, as GGUF stores them
        mins = (-torch.rand(n, k // 32) * 0.01).half().float()
        w, sm = pack_i8(q, scale, mins)
        for m in (int(r) for r in args.rows.split(",")):
            x = torch.randn(m, k)
            line = f"{name:8s} rows {m:3d}"
            for kind in ("i8", "i16"):
                best = [float("inf")] * len(mods)
                for _ in range(15):
                    for i, mod in enumerate(mods):
                        fn = getattr(mod, f"q4_linear_{kind}")
                        t = time.perf_counter()
                        for _ in range(5):
                            fn(x, w, sm, n)
                        best[i] = min(best[i], (time.perf_counter() - t) / 5)
                ys = [getattr(mod, f"q4_linear_{kind}")(x, w, sm, n) for mod in mods]
                assert all(torch.equal(ys[0], y) for y in ys[1:]), f"{kind} at {m} rows: the sources' bits differ"
                blocks = n / 8 * k / 32 * m
                line += f" | {kind}: " + " ".join(f"{b / blocks * 1e9:6.2f}" for b in best)
            print(line, flush=True)


if __name__ == "__main__":
    main()
