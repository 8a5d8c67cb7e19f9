"""The default model's matrix products: ``F.linear``, oneDNN with a packed weight, and the GGUF kernels.

Run: .venv/bin/python bench/linear_backends.py

For each decode shape of SmolLM2-135M (per layer: q/k/v, o, gate/up, down;
and the LM head), at 1, 8, 16 and 64 rows, in float32 and bfloat16: the median
time of ``F.linear`` (MKL's sgemm for float32, oneDNN with a plain weight for
bfloat16), of ``mkldnn._linear_pointwise`` over a weight packed once (what
``--quantization none`` runs on a CPU), and, in float32, of the kernel the
default runs on the GGUF's blocks (``q4_f32`` for the layers, ``q8_f32`` for
the tied LM head; ``layers/linear_kernels.py``). The weight-format pass's rule
(``model_executor/weight_format.py``) cites these figures. Weights stay in
cache here, so the numbers are the kernels' own speed, not the streaming a
real step adds.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch
import torch.nn.functional as F

from sglang.srt.layers.onednn_linear import onednn_linear, packs, prepack

SHAPES = {"qkv": (960, 576), "o": (576, 576), "gate_up": (3072, 576), "down": (576, 1536), "lm_head": (49152, 576)}


def median_ms(fn, n: int = 20) -> float:
    """Median wall time of ``fn()`` in ms over ``n`` calls after 3 warm-ups (also used by int8_probe.py)."""
    for _ in range(3):
        fn()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


def gguf_kernel(name: str, w: torch.Tensor, int8: bool = False) -> Any:
    """``w`` rounded to the format the default model stores it in, as the float32 GGUF kernel on it (``int8``: the
    int8 one, ``SGLANG_CPU_GGUF_MATH=int8``)."""
    import gguf
    from gguf.quants import quantize

    from sglang.srt.layers.linear_kernels import Q4F32, Q4I8, Q8F32, Q8I8
    from sglang.srt.layers.q4_packed import pack_f32, pack_i8, pack_q8_i8, q4_blocks, q8_blocks

    n, k = w.shape
    if name == "lm_head":  # the default model's tied embedding is Q8_0
        q8 = q8_blocks(quantize(w.numpy(), gguf.GGMLQuantizationType.Q8_0), k)
        return Q8I8(*pack_q8_i8(*q8), n) if int8 else Q8F32(*q8)
    q4 = q4_blocks(quantize(w.numpy(), gguf.GGMLQuantizationType.Q4_1), "Q4_1", k)
    return Q4I8(*pack_i8(*q4), n) if int8 else Q4F32(*pack_f32(*q4))


def main() -> None:
    torch.manual_seed(0)
    print(f"{'dtype':<9} {'product':<8} {'rows':>4} {'F.linear':>10} {'oneDNN':>10} {'GGUF kernel':>20} {'int8 kernel':>18}  oneDNN identical")
    for dtype in (torch.float32, torch.bfloat16):
        for name, (n, k) in SHAPES.items():
            w = torch.randn(n, k).to(dtype)
            wp = prepack(w, 64) if packs(dtype) else None  # bfloat16: AVX-512 BW/VL/DQ or AVX-NE-CONVERT only
            q = gguf_kernel(name, w) if dtype == torch.float32 else None
            qi = gguf_kernel(name, w, int8=True) if dtype == torch.float32 else None
            for rows in (1, 8, 16, 64):
                x = torch.randn(rows, k).to(dtype)
                dense = median_ms(lambda x=x, w=w: F.linear(x, w))
                packed = median_ms(lambda x=x, wp=wp: onednn_linear(x, wp, None)) if wp is not None else float("nan")
                same = torch.equal(F.linear(x, w), onednn_linear(x, wp, None)) if wp is not None else "-"
                gk = f"{q.kind} {median_ms(lambda x=x, q=q: q(x, None)):.3f}ms" if q is not None else "-"
                gi = f"{qi.kind} {median_ms(lambda x=x, q=qi: q(x, None)):.3f}ms" if qi is not None else "-"
                print(f"{str(dtype)[6:]:<9} {name:<8} {rows:>4} {dense:>8.3f}ms {packed:>8.3f}ms {gk:>20} {gi:>18}  {same}")


if __name__ == "__main__":
    main()
