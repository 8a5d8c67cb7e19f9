"""Packed GGUF Q4 weights reproduce the dequantized weights exactly (up to bf16 scales)."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
import torch
from gguf.quants import dequantize, quantize

from sglang.srt.layers.linear_kernels import Int4BF16, Int8Rows
from sglang.srt.layers.q4_packed import pack, pack_f32, q4_blocks, q8_blocks, q8_rows


@pytest.mark.parametrize("kind", ["Q4_0", "Q4_1"])
def test_blocks_decode_to_the_gguf_dequantization(kind):
    t = getattr(gguf.GGMLQuantizationType, kind)
    w = np.random.default_rng(0).standard_normal((48, 128)).astype(np.float32)
    raw = quantize(w, t)
    q, scale, mn = q4_blocks(raw, kind, 128)
    rebuilt = (q.view(48, 4, 32).float() * scale[..., None] + mn[..., None]).view(48, 128)
    torch.testing.assert_close(rebuilt, torch.from_numpy(dequantize(raw, t)), atol=1e-6, rtol=0)


def test_int4_kernel_matches_the_dense_product():
    w = np.random.default_rng(1).standard_normal((64, 256)).astype(np.float32)
    raw = quantize(w, gguf.GGMLQuantizationType.Q4_1)
    dense = torch.from_numpy(dequantize(raw, gguf.GGMLQuantizationType.Q4_1))
    x = torch.randn(3, 256, dtype=torch.bfloat16)
    y = Int4BF16(*pack(*q4_blocks(raw, "Q4_1", 256)), 64, 256, max_batch=8)(x, None)
    torch.testing.assert_close(y.float(), x.float() @ dense.t(), atol=0.15, rtol=0.02)  # bf16 scales and activations


def test_int8_rows_are_close_to_the_bfloat16_weight():
    torch.manual_seed(0)
    w = torch.randn(1000, 64).to(torch.bfloat16)
    h = torch.randn(8, 64).to(torch.bfloat16)
    dense = (h.float() @ w.float().t())
    got = Int8Rows(w, max_batch=8)(h, None).float()
    err = (got - dense).abs().max() / dense.abs().max()
    assert 0 < err < 0.01  # quantized, and close


def _q8_matrix(rows: int, cols: int):
    w = np.random.default_rng(5).standard_normal((rows, cols)).astype(np.float32)
    raw = quantize(w, gguf.GGMLQuantizationType.Q8_0)
    return q8_blocks(raw, cols), torch.from_numpy(dequantize(raw, gguf.GGMLQuantizationType.Q8_0).copy())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_q8_rows_are_the_gguf_dequantization_bit_for_bit(dtype):
    (q, scale), dense = _q8_matrix(300, 64)
    ids = torch.tensor([[0, 299, 17], [5, 5, 123]])
    assert torch.equal(q8_rows(q, scale, ids, dtype), dense.to(dtype)[ids])


def test_a_tensor_parallel_shard_keeps_its_own_rows_of_the_q8_blocks():
    from sglang.srt.layers.parallel import VocabParallelEmbedding

    (q, scale), _ = _q8_matrix(301, 64)  # 301 rows over 2 ranks: shards of 151, the last padded by one row
    emb = VocabParallelEmbedding(301, 64, 2, 1, torch.float32)
    emb.set_q8(q, scale)
    sq, ss = emb.q8
    assert sq.shape == (151, 64) and ss.shape == (151, 2) and emb.weight.is_meta
    assert torch.equal(sq[:150], q[151:]) and torch.equal(ss[:150], scale[151:])
    assert not sq[150].any() and not ss[150].any()


def test_float32_blocks_are_packed_in_the_c_kernels_layout():
    w = np.random.default_rng(4).standard_normal((64, 128)).astype(np.float32)
    q, scale, mn = q4_blocks(quantize(w, gguf.GGMLQuantizationType.Q4_1), "Q4_1", 128)
    nib, sm = pack_f32(q, scale, mn)
    assert nib.dtype == torch.uint8 and nib.shape == (64, 64) and sm.dtype == torch.float32 and sm.shape == (64, 4, 2)
    # byte i of a block: weight i in the low nibble, weight i + 16 in the high one (GGUF's order)
    assert torch.equal(nib[:, :16] & 15, q[:, :16]) and torch.equal(nib[:, :16] >> 4, q[:, 16:32])
    assert torch.equal(sm[..., 0], scale) and torch.equal(sm[..., 1], mn)


@pytest.mark.parametrize("kind", ["Q4_0", "Q4_1"])
def test_the_bf16_copies_are_the_exact_weights_rounded_once(kind):
    from sglang.srt.layers.q4_packed import dequant_q4_bf16, dequant_q8_bf16

    t = getattr(gguf.GGMLQuantizationType, kind)
    raw = quantize(np.random.default_rng(2).standard_normal((1100, 96)).astype(np.float32), t)  # past one 1,024-row band
    exact = torch.from_numpy(dequantize(raw, t))
    assert torch.equal(dequant_q4_bf16(*q4_blocks(raw, kind, 96)), exact.to(torch.bfloat16))
    raw8 = quantize(np.random.default_rng(3).standard_normal((4100, 64)).astype(np.float32), gguf.GGMLQuantizationType.Q8_0)
    exact8 = torch.from_numpy(dequantize(raw8, gguf.GGMLQuantizationType.Q8_0))
    assert torch.equal(dequant_q8_bf16(*q8_blocks(raw8, 64)), exact8.to(torch.bfloat16))


# the model's shapes (qkv, o, gate_up, down) and odd ones (N not a multiple of 16, K of one and three blocks)
BF16_SHAPES = [(960, 576), (576, 576), (3072, 576), (576, 1536), (67, 64), (13, 96), (9, 32)]


@pytest.mark.parametrize("n,k", BF16_SHAPES)
def test_the_bf16_kernel_is_the_float32_sum_of_bfloat16_products(n, k):
    from sglang.srt.layers.linear_kernels import OneDNNBF16
    from sglang.srt.layers.onednn_linear import packs, prepack

    if not packs(torch.bfloat16):
        pytest.skip("the bf16 arithmetic (amx family): oneDNN has no bfloat16 GEMM on this CPU (it needs AVX-512 BF16 or AMX)")
    gen = torch.Generator().manual_seed(n * k)
    w = torch.randn(n, k, generator=gen).to(torch.bfloat16)
    bias = torch.randn(n, generator=gen)
    kernel = OneDNNBF16(prepack(w, 64), n, k)
    for rows in (1, 3, 17, 64, 300):
        x = torch.randn(rows, k, generator=gen)
        y = kernel(x, bias)
        assert y.dtype == torch.float32 and y.shape == (rows, n)
        # bfloat16 x bfloat16 products are exact in float32 and oneDNN sums them in float32, then rounds the product to
        # bfloat16 (its output type; half an ulp: 2^-9 of it) before the float32 bias: this reference up to that
        ref = torch.nn.functional.linear(x.to(torch.bfloat16).double(), w.double())
        torch.testing.assert_close((y - bias).double(), ref, rtol=2**-8, atol=1e-4 * k**0.5)
        # and against the float32 product, the rounding of x and w to 8 bits of mantissa
        full = torch.nn.functional.linear(x, w.float(), bias)
        assert ((y - full).norm() / full.norm()).item() < 1e-2
