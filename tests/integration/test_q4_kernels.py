"""The packed float32 Q4 and Q8_0 kernels of the fused step against the dense product (needs g++)."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
import torch
from gguf.quants import dequantize, quantize

from sglang.srt.layers.q4_packed import q4_blocks

pytestmark = [pytest.mark.compiler]


@pytest.mark.parametrize("kind", ["Q4_0", "Q4_1"])
@pytest.mark.parametrize("rows,k", [(1, 320), (3, 320), (8, 320), (9, 320), (37, 320), (64, 320), (1, 1024), (13, 1024), (19, 1024)])
def test_float32_kernel_is_the_dense_float32_product_up_to_summation_order(kind, rows, k):
    # every batch size the engine may pass: up to 8 rows in one chunk, above in balanced chunks
    # (of at most 8 rows, or 6 for rows longer than 768 so a chunk of x stays in L1: 13 rows of 1024 run as 7 + 6)
    # the kernel rebuilds each weight as fma(scale, q, min): the gguf package's float32 value exactly,
    # so against a float64 product it is as close as the dense float32 product is
    from sglang.srt.layers.cpu_kernels import load_decode_kernels
    from sglang.srt.layers.q4_packed import pack_f32

    t = getattr(gguf.GGMLQuantizationType, kind)
    w = (0.1 * np.random.default_rng(3).standard_normal((200, k))).astype(np.float32)  # 200 rows: 12 blocks of 16 and a tail
    raw = quantize(w, t)
    dense = torch.from_numpy(dequantize(raw, t).copy())
    x = torch.randn(rows, k)
    y = load_decode_kernels().q4_linear_f32(x, *pack_f32(*q4_blocks(raw, kind, k)))
    exact = x.double() @ dense.double().t()
    dense_err = ((x @ dense.t()).double() - exact).abs().max().item()
    assert y.dtype == torch.float32 and y.shape == (rows, 200)
    assert (y.double() - exact).abs().max().item() <= 2 * dense_err + 1e-7


@pytest.mark.parametrize("rows", [1, 5, 9, 64])
def test_float32_q8_0_kernel_is_the_dense_float32_product_up_to_summation_order(rows):
    from sglang.srt.layers.cpu_kernels import load_decode_kernels
    from sglang.srt.layers.q4_packed import q8_blocks

    t = gguf.GGMLQuantizationType.Q8_0
    w = (0.1 * np.random.default_rng(6).standard_normal((200, 320))).astype(np.float32)
    raw = quantize(w, t)
    dense = torch.from_numpy(dequantize(raw, t).copy())
    x = torch.randn(rows, 320)
    y = load_decode_kernels().q8_linear_f32(x, *q8_blocks(raw, 320))
    exact = x.double() @ dense.double().t()
    dense_err = ((x @ dense.t()).double() - exact).abs().max().item()
    assert (y.double() - exact).abs().max().item() <= 2 * dense_err + 1e-7


def test_the_packed_float32_kernels_check_their_input():
    from sglang.srt.layers.cpu_kernels import load_decode_kernels
    from sglang.srt.layers.q4_packed import pack_f32

    q = torch.zeros(32, 64, dtype=torch.uint8)
    nib, sm = pack_f32(q, torch.ones(32, 2), torch.zeros(32, 2))
    kernels = load_decode_kernels()
    with pytest.raises(RuntimeError, match="the packed float32 kernels take at least one row"):
        kernels.q4_linear_f32(torch.randn(0, 64), nib, sm)
    with pytest.raises(RuntimeError, match=r"the packed float32 kernels take float32 x \[M, 64\]"):
        kernels.q4_linear_f32(torch.randn(2, 96), nib, sm)
