"""A/B two sources of the fused decode kernel in one process, on the default model.

Run: .venv/bin/python bench/kernel_ab.py OLD.cpp NEW.cpp [--dtype float32] [--quantization auto] [--prefix 107] [--batch 64]

e.g. with the committed kernels of an earlier revision as OLD (a source is built with the headers beside it):
    mkdir -p /tmp/old && git archive REV python/sglang/srt/layers/cpu_kernels/csrc | tar -x -C /tmp/old --strip-components 6
    .venv/bin/python bench/kernel_ab.py /tmp/old/decode_step.cpp python/sglang/srt/layers/cpu_kernels/csrc/decode_step.cpp

Both sources are built (cached like the engine's build) and each gets a
decode plan over the same model and KV pool; the two plans alternate, 22
steps each after 3 warm-ups, so machine noise hits them alike. Pages are
interleaved as requests that decode in step leave them. Prints the medians.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import time
from pathlib import Path
from types import ModuleType


def _load(source: Path, tag: str) -> ModuleType:
    from sglang.srt.layers.cpu_kernels.build import apply_weight_prefetch, build
    from sglang.srt.layers.cpu_kernels.isa import host_weight_prefetch

    so = build(source, f"sglang_kernel_ab_{tag}")  # the module name is the file stem, so the two differ
    spec = importlib.util.spec_from_file_location(so.name.split(".")[0], so)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    if hasattr(mod, "weight_prefetch_rows"):  # as the engine loads it
        apply_weight_prefetch(mod, mod.ISA_FAMILY)
    elif hasattr(mod, "set_weight_prefetch"):  # a source from before passes of several rows were prefetched
        mod.set_weight_prefetch(host_weight_prefetch(mod.ISA_FAMILY).bytes)
    return mod


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("a", type=Path)
    ap.add_argument("b", type=Path)
    ap.add_argument("--dtype", default="float32")  # the defaults: what `sglang serve` runs
    ap.add_argument("--quantization", default="auto")
    ap.add_argument("--prefix", type=int, default=107)
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args()
    os.environ["SGLANG_QUIET_LOAD"] = "1"
    import torch

    from inproc_scheduler import scheduler  # bench/ is the script's directory
    from sglang.srt.model_executor.forward_batch_info import ForwardMode, ModelWorkerBatch

    b, ppr = args.batch, -(-(args.prefix + 1) // 16)
    runner = scheduler(dtype=args.dtype, quantization=args.quantization or None, fused_decode="off", page_size=16,
                       max_total_tokens=16 * (1 + b * ppr), max_running_requests=b).tp_worker.model_runner
    plans = {tag: runner.model.build_decode_plan(_load(src, tag), runner.kv_pool) for tag, src in (("a", args.a), ("b", args.b))}
    pages = [[1 + j * b + i for j in range(ppr)] for i in range(b)]
    fb = runner.build_forward_batch(ModelWorkerBatch(ForwardMode.DECODE, [[5]] * b, [args.prefix] * b, pages, [None] * b))
    times: dict[str, list[float]] = {"a": [], "b": []}
    with torch.inference_mode():
        for i in range(25):
            for tag, plan in plans.items():
                t0 = time.perf_counter()
                runner.model.forward_decode_plan(plan, fb)
                if i >= 3:
                    times[tag].append(time.perf_counter() - t0)
    print(f"one decode step, {args.dtype}{'+' + args.quantization if args.quantization else ''}, batch {b}, "
          f"{args.prefix} cached tokens, median of 22")
    for tag, src in (("a", args.a), ("b", args.b)):
        print(f"  {src}: {statistics.median(times[tag]) * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
