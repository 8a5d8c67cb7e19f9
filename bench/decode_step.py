"""One decode step, eager beside fused, in-process on the default model.

Run: .venv/bin/python bench/decode_step.py [--dtype float32] [--quantization auto|none|gguf_q4] [--prefix 200] [--batches 1,16,64] [--page-size 1] [--contiguous]

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
    args = ap.parse_args()
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


if __name__ == "__main__":
    main()
