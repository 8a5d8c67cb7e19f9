"""This machine's ceilings for the default model: what no kernel can beat here.

Run: .venv/bin/python bench/limits.py [--llama-cpp 73.0,48.9] [--hf-64 298.9]

Measures, in one process:

1. DRAM read bandwidth (a 256 MB float32 sum, best of 8, all cores): a decode
   step reads every weight once, so bandwidth / bytes per step bounds the
   single stream;
2. the float32 matrix-product peak (a 2048^3 ``torch.mm``, best of 6, all
   cores), and bfloat16's beside it (oneDNN's, 2048^3 where the CPU has a native bfloat16 path, AVX-512 BF16
   or AMX; 512^3 on an AVX2-only CPU, which emulates it hundreds of times slower): the
   products' FLOPs per token bound every batched figure;
3. per kernel family this CPU has (``cpu_kernels/isa.py``), the GGUF kernels' own peaks: the float32, int8
   and int16 Q4 products at 64 rows and at one row on the 3072x576 ``gate_up`` shape, weights in cache (best
   of 10; of 200 at one row), as multiply-adds per second (a kernel's ceiling for a batch, not the
   instruction's; at one row each weight block is unpacked for a single row, so where that work outruns the
   memory, as on a Zen 1 EPYC, it bounds the single stream below the bandwidth);
4. the default configuration's bytes per decode step and FLOPs per token,
   summed over the kernels the weight-format pass gave its linear layers and LM
   head for one row (attention, norms and sampling excluded, so both ceilings are loose), its
   single-stream compute ceiling from the one-row peaks of 3 for the kernels it runs at one row, and its
   batch ceiling from the kernel peaks of 3 for the kernels it runs at 64 rows (``cpu_kernels/isa.py``
   picks the GGUF arithmetic per batch size: float32, int8, int16 or bfloat16 per layer; the ``amx`` family
   adds its bfloat16 product's peak, oneDNN's on AMX tiles) beside the best family's all-int8, all-float32 and
   all-bfloat16 ceilings.

Last, issue 27's throughput targets beside the ceiling that bounds each: concurrency 1 at 80% of the
bandwidth's (against the lower single-stream ceiling) always; with ``--llama-cpp C1,C16`` (the
``llama-cpp-python`` server's tokens/s at concurrency 1 and 16, from one ``bench/serving.py`` run; C16 is the
one a target needs) concurrency 16 at 15x; with ``--hf-64`` (Hugging Face in its fastest dtype at 64 requests,
from ``bench/offline.py``) offline at 2x that, and at half the best family's batch ceiling (its fastest arithmetic).
"""

from __future__ import annotations

import argparse
import os
import time

import torch


def read_bandwidth() -> float:
    """Bytes/s of the best of 8 sums over a 256 MB float32 tensor."""
    a = torch.ones(64 << 20)
    best = 0.0
    for _ in range(8):
        t0 = time.perf_counter()
        a.sum()
        best = max(best, a.numel() * 4 / (time.perf_counter() - t0))
    return best


def mm_peak(dtype: torch.dtype, n: int, reps: int) -> float:
    """FLOP/s of the best of ``reps`` n^3 products."""
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    best = 0.0
    for _ in range(reps):
        t0 = time.perf_counter()
        torch.mm(a, b)
        best = max(best, 2 * n**3 / (time.perf_counter() - t0))
    return best


def family_peaks(m: int = 64, reps: int = 10) -> list[tuple[str, dict[str, float]]]:
    """(family, GMAC/s of its Q4 kernels at ``m`` rows of gate_up by activation: ``f32``, ``i8``, ``i16``), for every
    family this CPU has (the fastest of ``reps`` calls each, alternating)."""
    import gguf
    from gguf.quants import quantize

    from sglang.host import cpu_flags
    from sglang.srt.layers.cpu_kernels.build import load_decode_kernels
    from sglang.srt.layers.cpu_kernels.isa import FAMILIES, supported
    from sglang.srt.layers.q4_packed import pack_f32, pack_i8, q4_blocks

    n, k = 3072, 576
    blocks = q4_blocks(quantize((0.05 * torch.randn(n, k)).numpy(), gguf.GGMLQuantizationType.Q4_1), "Q4_1", k)
    f32, i8 = pack_f32(*blocks), pack_i8(*blocks)
    x = torch.randn(m, k)
    out = []
    for fam in supported(cpu_flags()):
        ops = load_decode_kernels(FAMILIES[fam].name)
        best = {"f32": 0.0, "i8": 0.0, "i16": 0.0}
        fns = [("f32", lambda o=ops: o.q4_linear_f32(x, *f32)), ("i8", lambda o=ops: o.q4_linear_i8(x, *i8, n)),
               ("i16", lambda o=ops: o.q4_linear_i16(x, *i8, n))]
        if fam == "amx":  # its bf16 arithmetic: oneDNN's bfloat16 GEMM (AMX tiles) on the blocks' bfloat16 copy
            from sglang.srt.layers.linear_kernels import OneDNNBF16
            from sglang.srt.layers.onednn_linear import prepack
            from sglang.srt.layers.q4_packed import dequant_q4_bf16

            bf = OneDNNBF16(prepack(dequant_q4_bf16(*blocks), 64), n, k)
            best["bf16"] = 0.0
            fns.append(("bf16", lambda b=bf: b(x, None)))
        for _ in range(reps):  # alternating, so noise hits all alike
            for name, fn in fns:
                t0 = time.perf_counter()
                fn()
                best[name] = max(best[name], m * n * k / (time.perf_counter() - t0))
        out.append((fam, {a: v / 1e9 for a, v in best.items()}))
    return out


def _arith(kernel: object) -> str:
    kind = getattr(kernel, "kind", "")
    return kind.rpartition("_")[2] if kind.endswith(("_i8", "_i16", "_bf16")) and kind != "int4_bf16" else "f32"


def default_model_cost() -> tuple[int, int, dict[str, int], dict[str, int], str]:
    """(bytes read per one-row decode step, FLOPs per token, multiply-adds per token by the arithmetic that runs
    them at one row and at 64 rows (``f32``/``i8``/``i16``), kernel summary) of the default configuration."""
    os.environ["SGLANG_QUIET_LOAD"] = "1"
    from inproc_scheduler import scheduler  # bench/ is the script's directory
    from sglang.srt.layers.linear_kernels import BySize

    runner = scheduler(max_total_tokens=4096).tp_worker.model_runner
    nbytes = flops = 0
    macs = {"f32": 0, "i8": 0, "i16": 0, "bf16": 0}
    macs1 = dict(macs)
    for _, mod in runner.model.named_modules():
        kernel = getattr(mod, "kernel", None)
        if kernel is not None and hasattr(kernel, "nbytes"):
            one = kernel.for_batch(1) if isinstance(kernel, BySize) else kernel  # what a one-row step reads
            nbytes += one.nbytes()
            flops += 2 * kernel.out_features * kernel.in_features
            at64 = kernel.for_batch(64) if isinstance(kernel, BySize) else kernel
            macs[_arith(at64)] += kernel.out_features * kernel.in_features
            macs1[_arith(one)] += kernel.out_features * kernel.in_features
    return nbytes, flops, macs1, macs, runner.weight_format.summary()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-cpp", default="", help="llama-cpp-python server tokens/s at concurrency 1,16 (one serving.py run; the target uses 16's)")
    ap.add_argument("--hf-64", "--hf-float32-64", type=float, default=0.0,
                    help="Hugging Face tokens/s at 64 requests in its fastest dtype on this CPU (offline.py)")
    args = ap.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    native_bf16 = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())  # AVX-512 BF16 / AMX: oneDNN runs it natively
    bw, f32 = read_bandwidth(), mm_peak(torch.float32, 2048, 6)
    bf16 = mm_peak(torch.bfloat16, 2048 if native_bf16 else 512, 6 if native_bf16 else 2)
    peaks, peaks1 = family_peaks(), family_peaks(1, 200)
    nbytes, flops, macs1, macs, summary = default_model_cost()
    step_floor = nbytes / bw
    compute_cap = f32 / flops
    print(f"{os.cpu_count()} cores: DRAM read {bw / 1e9:.1f} GB/s; matrix products float32 {f32 / 1e9:.0f} GFLOP/s, "
          f"bfloat16 {bf16 / 1e9:.1f} GFLOP/s")
    print(f"default configuration ({summary}): {nbytes / 1e6:.1f} MB of weights read per decode step, "
          f"{flops / 1e6:.0f} MFLOP of products per token")
    for fam, pk in peaks:
        kinds = [a for a in ("f32", "i8", "i16", "bf16") if a in pk]
        print(f"kernel family {fam}: Q4 product at 64 rows, " + ", ".join(f"{a} {pk[a]:.0f} GMAC/s ({pk[a] / pk['f32']:.2f}x)" for a in kinds)
              + f": a batch of the default model at most {' / '.join(f'{pk[a] * 1e9 / (flops / 2):.0f}' for a in kinds)} tokens/s")
    print(f"single stream ceiling (bandwidth): {step_floor * 1e3:.2f} ms a step, {1 / step_floor:.0f} tokens/s")
    print(f"any batch ceiling (float32 peak):  {compute_cap:.0f} tokens/s")
    single_cap = 1 / step_floor
    if peaks:
        from sglang.srt.layers.cpu_kernels.build import load_decode_kernels

        chosen = load_decode_kernels().FAMILY
        pk1 = next(p for fam, p in peaks1 if fam == chosen)
        one_row = 1 / sum(macs1[a] / (pk1[a] * 1e9) for a in macs1 if macs1[a])
        print(f"single stream ceiling (compute: {chosen}'s kernels at one row, weights in cache, f32 / i8 / i16 "
              f"{' / '.join(f'{pk1[a]:.1f}' for a in ('f32', 'i8', 'i16'))} GMAC/s): {1e3 / one_row:.2f} ms a step, "
              f"{one_row:.0f} tokens/s ({'below' if one_row < single_cap else 'above'} the bandwidth's)")
        single_cap = min(single_cap, one_row)
        pk = next(p for fam, p in peaks if fam == chosen)
        mine = 1 / sum(macs[a] / (pk[a] * 1e9) for a in macs if macs[a])
        share = ", ".join(f"{macs[a] / sum(macs.values()):.0%} {a}" for a in macs if macs[a])
        print(f"batch ceiling of the default's kernels at 64 rows ({chosen}; multiply-adds {share}): {mine:.0f} tokens/s; "
              f"the best family all int8 {max(p['i8'] for _, p in peaks) * 2e9 / flops:.0f}, all float32 "
              f"{max(p['f32'] for _, p in peaks) * 2e9 / flops:.0f}"
              + "".join(f", all bfloat16 (AMX) {p['bf16'] * 2e9 / flops:.0f}" for f, p in peaks if "bf16" in p))
        compute_cap = mine
    rows = []
    if args.llama_cpp:
        _, c16 = (float(v) for v in args.llama_cpp.split(","))
        rows += [("server c=16 >= 15x llama.cpp", 15 * c16, compute_cap)]
    rows.append(("server c=1 >= 80% bandwidth", 0.8 / step_floor, single_cap))  # the lower single-stream ceiling
    if args.hf_64:
        rows.append(("offline 64 >= 2x HF", 2 * args.hf_64, compute_cap))
        if peaks:
            best = max(max(p.values()) for _, p in peaks)  # the best family's fastest arithmetic (int8, or AMX's bf16)
            rows.append(("offline 64 >= 50% best family", 0.5 * best * 2e9 / flops, compute_cap))
    if rows:
        print(f"{'target':<30} {'needs tok/s':>11} {'ceiling':>8} {'needs/ceiling':>13}")
        for name, need, cap in rows:
            print(f"{name:<30} {need:>11.0f} {cap:>8.0f} {need / cap:>12.2f}x")


if __name__ == "__main__":
    main()
