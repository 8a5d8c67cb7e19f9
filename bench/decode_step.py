"""One decode step, eager beside fused, in-process on the default model.

Run: .venv/bin/python bench/decode_step.py [--dtype float32] [--quantization auto|none|gguf_q4] [--prefix 200] [--batches 1,16,64] [--page-size 1] [--contiguous]
     .venv/bin/python bench/decode_step.py --maths float32,int8   (the fused step on each GGUF arithmetic, alternating)
     .venv/bin/python bench/decode_step.py --maths float32,mixed,int8 --batches 1,4,32,128   (one batch per bucket of
         ``cpu_kernels/isa.py``'s BUCKETS: also prints the run as an ``isa.MEASURED`` entry and what it picks)
     .venv/bin/python bench/decode_step.py --prefetch 0,512,1024,2048,4096 --batches 1   (the default's fused step at
         each weight prefetch distance, alternating: what ``isa.WEIGHT_PREFETCH`` holds per CPU model)

Every request of the batch has ``--prefix`` tokens in the KV cache on pages of
its own, interleaved as requests that decode in step leave them (request i's
page j is ``1 + j * batch + i``; ``--contiguous`` gives each request one run of
pages instead, which the hardware prefetcher follows); each figure is the median of 10 steps after 3 warm-ups, in the
same process, the eager step (``TorchNativeAttnBackend`` over the model's
Python forward) and the fused plan (``--fused-decode``) alternating.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--quantization", default="auto", help="auto (the default's), none, gguf_q4")
    ap.add_argument("--prefix", type=int, default=200)
    ap.add_argument("--batches", default="1,16,64")
    ap.add_argument("--contiguous", action="store_true", help="each request's pages in one run")
    ap.add_argument("--page-size", type=int, default=1, help="tokens a KV page (1: the default)")
    ap.add_argument("--best", action="store_true", help="with --maths: the fastest of the alternating steps, not the median "
                    "(on a machine other processes share, the steps they did not slow)")
    ap.add_argument("--maths", default="", help="A,B: fused steps on each SGLANG_CPU_GGUF_MATH, alternating, instead of eager vs fused")
    ap.add_argument("--prefetch-rows", type=int, default=0, help="with --prefetch: prefetch passes of up to this many rows "
                    "(default: the rows this CPU's setting names)")
    ap.add_argument("--prefetch", default="", help="D1,D2: the fused step at each weight prefetch distance (bytes, 0: off), alternating")
    args = ap.parse_args()
    if args.maths:
        return compare_maths(args)
    if args.prefetch:
        return compare_prefetch(args)
    os.environ["SGLANG_QUIET_LOAD"] = "1"
    from inproc_scheduler import scheduler  # bench/ is the script's directory
    from sglang.srt.model_executor.forward_batch_info import ForwardMode, ModelWorkerBatch

    batches = [int(b) for b in args.batches.split(",")]
    ps = args.page_size
    pages_per_req = -(-(args.prefix + 1) // ps)
    runner = scheduler(dtype=args.dtype, quantization=args.quantization, fused_decode="on", page_size=ps,
                       max_total_tokens=ps * (1 + max(batches) * pages_per_req), max_running_requests=max(batches)).tp_worker.model_runner
    fused = runner.fused_decode

    def eager(fb):
        runner.attn.init_forward_metadata(fb)
        return runner.model(fb.input_ids, fb.positions, fb, runner.attn)

    print(f"one decode step, {args.dtype}{'+' + args.quantization if args.quantization else ''}, {args.prefix} cached tokens per request "
          f"({'contiguous' if args.contiguous else 'interleaved'} pages of {ps}), "
          f"{os.cpu_count()} cores, median of 10")
    print(f"{'batch':>5} {'eager':>10} {'fused':>10} {'speed-up':>9}")

    def step_ms(b: int) -> tuple[float, float]:
        if args.contiguous:
            pages = [[1 + i * pages_per_req + j for j in range(pages_per_req)] for i in range(b)]
        else:
            pages = [[1 + j * b + i for j in range(pages_per_req)] for i in range(b)]
        fb = runner.build_forward_batch(ModelWorkerBatch(ForwardMode.DECODE, [[5]] * b, [args.prefix] * b, pages, [None] * b))
        times: dict[str, list[float]] = {"eager": [], "fused": []}
        with torch.inference_mode():
            for i in range(13):
                for name, fn in (("eager", eager), ("fused", fused.run)):
                    t0 = time.perf_counter()
                    fn(fb)
                    if i >= 3:
                        times[name].append(time.perf_counter() - t0)
        return statistics.median(times["eager"]) * 1e3, statistics.median(times["fused"]) * 1e3

    for b in batches:  # untimed: a process's first steps run slow (page faults, thread start-up)
        step_ms(b)
    for b in batches:
        e, f = step_ms(b)
        print(f"{b:>5} {e:>8.1f} ms {f:>8.1f} ms {e / f:>8.2f}x")


def compare_maths(args: argparse.Namespace) -> None:
    """The fused step of one runner per GGUF arithmetic, alternating in this process (noise hits them alike)."""
    os.environ["SGLANG_QUIET_LOAD"] = "1"
    from inproc_scheduler import gguf_math, scheduler  # bench/ is the script's directory
    from sglang.srt.model_executor.forward_batch_info import ForwardMode, ModelWorkerBatch
    from sglang.srt.runtime_context import get_context

    batches = [int(b) for b in args.batches.split(",")]
    maths = args.maths.split(",")
    ps, ppr = args.page_size, -(-(args.prefix + 1) // args.page_size)
    runners = {}
    for m in maths:
        with get_context().preserve_config(), gguf_math(f"x@{m}"):
            runners[m] = scheduler(dtype=args.dtype, quantization=args.quantization, fused_decode="on", page_size=ps,
                                   max_total_tokens=ps * (1 + max(batches) * ppr), max_running_requests=max(batches)).tp_worker.model_runner
    print(f"one fused decode step, {args.dtype}+{args.quantization}, {args.prefix} cached tokens per request, pages of {ps}, "
          f"{os.cpu_count()} cores, {'best' if args.best else 'median'} of 15, alternating: " + ", ".join(f"{m}: {r.weight_format.summary()}" for m, r in runners.items()))
    print(f"{'batch':>5} " + " ".join(f"{m:>10}" for m in maths) + f" {maths[0]}/{maths[-1]:<6}")
    table: dict[str, list[float]] = {m: [] for m in maths}
    for n, b in enumerate([batches[0], *batches]):  # the first not printed: a process's first steps run slow
        pages = [[1 + j * b + i for j in range(ppr)] for i in range(b)]
        fbs = {m: r.build_forward_batch(ModelWorkerBatch(ForwardMode.DECODE, [[5]] * b, [args.prefix] * b, pages, [None] * b))
               for m, r in runners.items()}
        times: dict[str, list[float]] = {m: [] for m in maths}
        with torch.inference_mode():
            for i in range(18):
                for m in maths:
                    t0 = time.perf_counter()
                    runners[m].fused_decode.run(fbs[m])
                    if i >= 3:
                        times[m].append(time.perf_counter() - t0)
        med = {m: (min(t) if args.best else statistics.median(t)) * 1e3 for m, t in times.items()}
        if n:
            print(f"{b:>5} " + " ".join(f"{med[m]:>7.1f} ms" for m in maths) + f" {med[maths[0]] / med[maths[-1]]:>8.2f}x")
            for m in maths:
                table[m].append(round(med[m], 1))
    print_measured(batches, table, args)


def compare_prefetch(args: argparse.Namespace) -> None:
    """The default's fused step at each weight prefetch distance (``set_weight_prefetch``, process-wide), alternating
    in one process; a distance is worth taking where it beats 0 by more than ``isa.MARGIN``."""
    os.environ["SGLANG_QUIET_LOAD"] = "1"
    from inproc_scheduler import scheduler  # bench/ is the script's directory
    from sglang.srt.layers.cpu_kernels import load_decode_kernels
    from sglang.srt.layers.cpu_kernels.isa import MARGIN
    from sglang.srt.model_executor.forward_batch_info import ForwardMode, ModelWorkerBatch

    batches = [int(b) for b in args.batches.split(",")]
    dists = [int(d) for d in args.prefetch.split(",")]
    ps, ppr = args.page_size, -(-(args.prefix + 1) // args.page_size)
    runner = scheduler(dtype=args.dtype, quantization=args.quantization, fused_decode="on", page_size=ps,
                       max_total_tokens=ps * (1 + max(batches) * ppr), max_running_requests=max(batches)).tp_worker.model_runner
    kernels = load_decode_kernels()
    was, rows = kernels.weight_prefetch(), kernels.weight_prefetch_rows()
    test_rows = args.prefetch_rows or rows
    print(f"one fused decode step, {runner.weight_format.summary()}, {args.prefix} cached tokens per request, {os.cpu_count()} cores, "
          f"median (best) of 45, the distances alternating")
    print(f"{'batch':>5} " + " ".join(f"{d:>17}" for d in dists))
    try:
        for n, b in enumerate([batches[0], *batches]):  # the first not printed: a process's first steps run slow
            pages = [[1 + j * b + i for j in range(ppr)] for i in range(b)]
            fb = runner.build_forward_batch(ModelWorkerBatch(ForwardMode.DECODE, [[5]] * b, [args.prefix] * b, pages, [None] * b))
            times: dict[int, list[float]] = {d: [] for d in dists}
            with torch.inference_mode():
                for i in range(48 if n else 6):
                    for d in dists:
                        kernels.set_weight_prefetch(d, test_rows)  # in passes of the rows the CPU's setting names, or --prefetch-rows
                        t0 = time.perf_counter()
                        runner.fused_decode.run(fb)
                        if i >= 3:
                            times[d].append(time.perf_counter() - t0)
            if n:
                med = {d: statistics.median(t) * 1e3 for d, t in times.items()}
                print(f"{b:>5} " + " ".join(f"{med[d]:>7.2f} ({min(times[d]) * 1e3:>5.2f}) ms" for d in dists))
                if 0 in med:
                    best = min(med, key=med.__getitem__)
                    worth = best != 0 and med[0] > MARGIN * med[best]
                    print(f"      fastest {best} bytes, {med[0] / med[best]:.2f}x off: "
                          f"{'worth taking' if worth else f'within {MARGIN:g}x of off, not worth it'}")
    finally:
        kernels.set_weight_prefetch(was, rows)


def print_measured(batches: list[int], table: dict[str, list[float]], args: argparse.Namespace) -> None:
    """With one batch size per bucket of ``isa.BUCKETS``, the run as an ``isa.MEASURED`` entry (the table the
    GGUF arithmetic per batch size is chosen from), and the arithmetic that entry picks for each bucket."""
    from sglang.host import cpu_model
    from sglang.srt.layers.cpu_kernels import isa

    if len(batches) != len(isa.BUCKETS) or any(bucket_of(b) != i for i, b in enumerate(batches)):
        return
    cmd = f"bench/decode_step.py{' --best' if args.best else ''} --maths {args.maths} --batches {args.batches}"
    run = isa.Measured(cpu_model(), cmd, {m: tuple(v) for m, v in table.items()})  # type: ignore[misc]
    print(f"isa.MEASURED entry: {run!r}")
    allowed = [[m for m in isa.eligible(bucket=b) if m not in isa.HELD] for b in range(len(isa.BUCKETS))]
    print(f"picks (each bucket among its arithmetics at >= {isa.QUALITY_BAR:g}% agreement, held: {', '.join(isa.HELD) or 'none'}; "
          "isa.measured_plan): " + ", ".join(f"{label}: {m}" for (label, _), m in zip(isa.BUCKETS, isa.measured_plan(run.ms, allowed))))


def bucket_of(rows: int) -> int:
    from sglang.srt.layers.cpu_kernels import isa

    return next(i for i, (_, most) in enumerate(isa.BUCKETS) if most == 0 or rows <= most)


if __name__ == "__main__":
    main()
