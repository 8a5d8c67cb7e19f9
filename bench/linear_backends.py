"""The default model's matrix products: ``F.linear`` beside oneDNN with a packed weight.

Run: .venv/bin/python bench/linear_backends.py

For each decode shape of SmolLM2-135M (per layer: q/k/v, o, gate/up, down;
and the LM head), at 1 and 64 rows, in float32 and bfloat16: the median time
of ``F.linear`` (MKL's sgemm for float32, oneDNN with a plain weight for
bfloat16) and of ``mkldnn._linear_pointwise`` over a weight packed once
(``layers/onednn_linear.py``, what the engine runs on a CPU), and whether the
two results are bit-identical. Weights stay in cache here, so the numbers are
the kernels' own speed, not the streaming a real step adds.
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.nn.functional as F

from sglang.srt.layers.onednn_linear import onednn_linear, prepack

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


def main() -> None:
    torch.manual_seed(0)
    print(f"{'dtype':<9} {'product':<8} {'rows':>4} {'F.linear':>10} {'packed':>10} {'speed-up':>9}  identical")
    for dtype in (torch.float32, torch.bfloat16):
        for name, (n, k) in SHAPES.items():
            w = torch.randn(n, k).to(dtype)
            wp = prepack(w, 64)
            for rows in (1, 64):
                x = torch.randn(rows, k).to(dtype)
                dense = median_ms(lambda x=x, w=w: F.linear(x, w))
                packed = median_ms(lambda x=x, wp=wp: onednn_linear(x, wp, None))
                same = torch.equal(F.linear(x, w), onednn_linear(x, wp, None))
                print(f"{str(dtype)[6:]:<9} {name:<8} {rows:>4} {dense:>8.3f}ms {packed:>8.3f}ms {dense / packed:>8.2f}x  {same}")


if __name__ == "__main__":
    main()
