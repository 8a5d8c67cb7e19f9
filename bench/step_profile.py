"""Where one fused decode step's time goes, in-process on the default model: the whole step, the plan (the
30 layers) alone, the final norm + LM head alone, and the layers' 120 products alone (each linear once, in
layer order, as the step streams them), at each batch size.

Run: .venv/bin/python bench/step_profile.py [--batches 1,4] [--prefix 200]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="1,4")
    ap.add_argument("--prefix", type=int, default=200)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--kv-cache-dtype", default="auto")
    args = ap.parse_args()
    os.environ["SGLANG_QUIET_LOAD"] = "1"
    from inproc_scheduler import scheduler  # bench/ is the script's directory
    from sglang.srt.model_executor.forward_batch_info import ForwardMode, ModelWorkerBatch

    batches = [int(b) for b in args.batches.split(",")]
    ppr = args.prefix + 1
    runner = scheduler(fused_decode="on", kv_cache_dtype=args.kv_cache_dtype, max_total_tokens=1 + max(batches) * ppr, max_running_requests=max(batches)).tp_worker.model_runner
    model, fused = runner.model, runner.fused_decode
    linears = [m for layer in model.layers for m in (layer.self_attn.qkv_proj, layer.self_attn.o_proj, layer.mlp.gate_up_proj, layer.mlp.down_proj)]
    print(f"{os.cpu_count()} cores, torch threads {torch.get_num_threads()}, {runner.weight_format.summary()}, KV {runner.kv_cache_dtype}, "
          f"{args.prefix} cached tokens a request, median of {args.reps}")
    print(f"{'batch':>5} {'step':>9} {'plan':>9} {'head':>9} {'products':>9} {'rest of plan':>12}")
    for n, b in enumerate([batches[0], *batches]):  # the first not printed: a process's first steps run slow
        pages = [[1 + j * b + i for j in range(ppr)] for i in range(b)]
        fb = runner.build_forward_batch(ModelWorkerBatch(ForwardMode.DECODE, [[5]] * b, [args.prefix] * b, pages, [None] * b))
        hidden = model.embed_tokens(fb.input_ids).float()
        acts = {}
        for layer in model.layers:
            for m, n in ((layer.self_attn.qkv_proj, 576), (layer.self_attn.o_proj, 576), (layer.mlp.gate_up_proj, 576), (layer.mlp.down_proj, 1536)):
                acts[id(m)] = torch.randn(b, n)
        cos, sin = model.rotary.cos[fb.positions], model.rotary.sin[fb.positions]

        def step():
            fused.run(fb)

        def plan():
            h = hidden.clone()
            fused.plan.run(h, cos, sin, fb.kv_index, fb.kv_lens, fb.out_cache_loc)

        def head():
            model.lm_head(model.norm(hidden).to(model.norm.weight.dtype))

        def products():
            for m in linears:
                m.forward(acts[id(m)])

        t: dict[str, list[float]] = {k: [] for k in ("step", "plan", "head", "products")}
        with torch.inference_mode():
            for i in range(args.reps + 3):
                for name, fn in (("step", step), ("plan", plan), ("head", head), ("products", products)):
                    t0 = time.perf_counter()
                    fn()
                    if i >= 3:
                        t[name].append((time.perf_counter() - t0) * 1e3)
        med = {k: statistics.median(v) for k, v in t.items()}
        if not n:
            continue
        print(f"{b:>5} {med['step']:>6.2f} ms {med['plan']:>6.2f} ms {med['head']:>6.2f} ms {med['products']:>6.2f} ms "
              f"{med['plan'] - med['products']:>9.2f} ms")


if __name__ == "__main__":
    main()
