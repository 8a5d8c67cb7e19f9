"""Where one fused decode step's time goes, in-process on the default model: the whole step, the plan (the
30 layers) alone, the final norm + LM head alone, and the layers' 120 products alone (each linear once, in
layer order, on random inputs of the step's shape), at each batch size; ``rest`` is the plan minus the
products (norms, rotary, the KV write and attention).

Run: .venv/bin/python bench/step_profile.py [--batches 1,16,64] [--prefix 200] [--kv-cache-dtype auto|float32|bfloat16]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

import torch


def profile(runner: Any, batch: int, prefix: int, reps: int) -> dict[str, float]:
    """Median ms of the step, the plan, the head and the products for ``batch`` requests of ``prefix`` cached tokens
    (request i's page j is ``1 + j * batch + i``: pages of 1, interleaved as requests decoding in step leave them)."""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode, ModelWorkerBatch

    model, fused = runner.model, runner.fused_decode
    pages = [[1 + j * batch + i for j in range(prefix + 1)] for i in range(batch)]
    fb = runner.build_forward_batch(ModelWorkerBatch(ForwardMode.DECODE, [[5]] * batch, [prefix] * batch, pages, [None] * batch))
    hidden = model.embed_tokens(fb.input_ids).float()
    cos, sin = model.rotary.cos[fb.positions], model.rotary.sin[fb.positions]
    linears = [(m, torch.randn(batch, n)) for layer in model.layers
               for m, n in ((layer.self_attn.qkv_proj, 576), (layer.self_attn.o_proj, 576), (layer.mlp.gate_up_proj, 576),
                            (layer.mlp.down_proj, 1536))]

    def plan() -> None:
        fused.plan.run(hidden.clone(), cos, sin, fb.kv_index, fb.kv_lens, fb.out_cache_loc)

    def head() -> None:
        model.lm_head(model.norm(hidden).to(model.norm.weight.dtype))

    def products() -> None:
        for m, x in linears:
            m.forward(x)

    parts = {"step": lambda: fused.run(fb), "plan": plan, "head": head, "products": products}
    times: dict[str, list[float]] = {k: [] for k in parts}
    with torch.inference_mode():
        for i in range(reps + 3):
            for name, fn in parts.items():
                t0 = time.perf_counter()
                fn()
                if i >= 3:
                    times[name].append((time.perf_counter() - t0) * 1e3)
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--prefix", type=int, default=200)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--kv-cache-dtype", default="auto")
    args = ap.parse_args()
    os.environ["SGLANG_QUIET_LOAD"] = "1"
    from inproc_scheduler import scheduler  # bench/ is the script's directory

    batches = [int(b) for b in args.batches.split(",")]
    runner = scheduler(fused_decode="on", kv_cache_dtype=args.kv_cache_dtype, max_total_tokens=1 + max(batches) * (args.prefix + 1),
                       max_running_requests=max(batches)).tp_worker.model_runner
    print(f"{os.cpu_count()} cores, torch threads {torch.get_num_threads()}, {runner.weight_format.summary()}, KV {runner.kv_cache_dtype}, "
          f"{args.prefix} cached tokens a request, median of {args.reps}")
    print(f"{'batch':>5} {'step':>9} {'plan':>9} {'head':>9} {'products':>9} {'rest':>9}")
    for n, b in enumerate([batches[0], *batches]):  # the first not printed: a process's first steps run slow
        med = profile(runner, b, args.prefix, args.reps)
        if n:
            print(f"{b:>5} {med['step']:>6.2f} ms {med['plan']:>6.2f} ms {med['head']:>6.2f} ms {med['products']:>6.2f} ms "
                  f"{med['plan'] - med['products']:>6.2f} ms")


if __name__ == "__main__":
    main()
