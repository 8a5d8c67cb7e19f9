"""The GGUF kernels of every kernel family this CPU has, float32 beside int8 math, alternating in one process.

Run: .venv/bin/python bench/gguf_kernels.py [--rows 1,8,16,64] [--reps 30]

For each decode shape of SmolLM2-135M (qkv, o, gate_up, down on Q4_1 blocks; the tied LM head on Q8_0),
each number of rows, each family (``cpu_kernels/isa.py``) and each arithmetic (``q4_f32``/``q8_f32``: the
exact weights; ``q4_i8``/``q8_i8``: activations int8 per block of 32), the best of ``--reps`` calls,
the candidates alternating so that machine noise (other processes on the cores) hits them alike; weights
in cache. Ratios are against the first family's float32 kernel. The best, not the median: on a shared
machine a median mostly measures the other processes.
"""

from __future__ import annotations

import argparse
import time

import gguf
import torch
from gguf.quants import quantize

from sglang.host import cpu_flags
from sglang.srt.layers.cpu_kernels.build import load_decode_kernels
from sglang.srt.layers.cpu_kernels.isa import supported
from sglang.srt.layers.q4_packed import pack_f32, pack_i8, pack_q8_i8, q4_blocks, q8_blocks

SHAPES = {"qkv": (960, 576), "o": (576, 576), "gate_up": (3072, 576), "down": (576, 1536), "lm_head": (49152, 576)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", default="1,8,16,64")
    ap.add_argument("--reps", type=int, default=30)
    a = ap.parse_args()
    fams = supported(cpu_flags())
    mods = {f: load_decode_kernels(f) for f in fams}
    torch.manual_seed(0)
    print(f"best of {a.reps} alternating calls, ms (ratio against {fams[0]} float32); families: {', '.join(fams)}")
    for name, (n, k) in SHAPES.items():
        w = (0.05 * torch.randn(n, k)).numpy()
        if name == "lm_head":
            q8 = q8_blocks(quantize(w, gguf.GGMLQuantizationType.Q8_0), k)
            f32, i8, wf, wi = "q8_linear_f32", "q8_linear_i8", q8, (*pack_q8_i8(*q8), n)
        else:
            q4 = q4_blocks(quantize(w, gguf.GGMLQuantizationType.Q4_1), "Q4_1", k)
            f32, i8, wf, wi = "q4_linear_f32", "q4_linear_i8", pack_f32(*q4), (*pack_i8(*q4), n)
        for rows in (int(r) for r in a.rows.split(",")):
            x = torch.randn(rows, k)
            cands = {}
            for fam, m in mods.items():
                cands[f"{fam} float32"] = (getattr(m, f32), (x, *wf))
                cands[f"{fam} int8"] = (getattr(m, i8), (x, *wi))
            best = dict.fromkeys(cands, float("inf"))
            reps = max(3, a.reps // 6) if name == "lm_head" else a.reps
            for fn, args in cands.values():
                fn(*args)
            for _ in range(reps):
                for c, (fn, args) in cands.items():
                    t0 = time.perf_counter()
                    fn(*args)
                    best[c] = min(best[c], time.perf_counter() - t0)
            base = best[f"{fams[0]} float32"]
            print(f"{name:<8} {rows:>3}  " + "  ".join(f"{c} {v * 1e3:.3f} ({base / v:.2f}x)" for c, v in best.items()), flush=True)


if __name__ == "__main__":
    main()
