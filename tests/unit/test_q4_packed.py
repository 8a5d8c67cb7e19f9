"""Packed GGUF Q4 weights reproduce the dequantized weights exactly (up to bf16 scales)."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
import torch
from gguf.quants import dequantize, quantize

from sglang.srt.layers.parallel import ColumnParallelLinear, RowParallelLinear
from sglang.srt.layers.q4_packed import pack, q4_blocks, q4_linear


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
    y = q4_linear(x, *pack(*q4_blocks(raw, "Q4_1", 256)))
    torch.testing.assert_close(y.float(), x.float() @ dense.t(), atol=0.15, rtol=0.02)  # bf16 scales and activations


def test_linear_layers_use_the_packed_copy_only_for_small_batches():
    w = np.random.default_rng(2).standard_normal((64, 128)).astype(np.float32)
    raw = quantize(w, gguf.GGMLQuantizationType.Q4_1)
    dense = torch.from_numpy(dequantize(raw, gguf.GGMLQuantizationType.Q4_1))
    col = ColumnParallelLinear(128, [64], False, 1, 0, torch.bfloat16)
    col.load([dense])
    col.weight.data.zero_()  # makes the dense path recognisable
    col.load_q4([q4_blocks(raw, "Q4_1", 128)], max_batch=2)
    small, big = torch.randn(2, 128, dtype=torch.bfloat16), torch.randn(3, 128, dtype=torch.bfloat16)
    assert col(small).abs().sum() > 0 and col(big).abs().sum() == 0
    row = RowParallelLinear(128, 64, 1, 0, torch.bfloat16)
    row.load(dense)
    row.load_q4(q4_blocks(raw, "Q4_1", 128), max_batch=2)
    torch.testing.assert_close(row(small).float(), small.float() @ dense.t(), atol=0.15, rtol=0.02)


def test_int8_lm_head_is_close_and_used_only_for_small_bfloat16_batches():
    from sglang.srt.layers.parallel import ParallelLMHead, VocabParallelEmbedding

    torch.manual_seed(0)
    emb = VocabParallelEmbedding(1000, 64, 1, 0, torch.bfloat16)
    emb.weight.data.copy_(torch.randn(1000, 64).to(torch.bfloat16))
    head = ParallelLMHead(emb, True, 64, torch.bfloat16)
    h = torch.randn(12, 64).to(torch.bfloat16)
    dense = head(h).float()
    head.load_int8(max_batch=8)
    small = head(h[:8]).float()
    err = (small - dense[:8]).abs().max() / dense[:8].abs().max()
    assert 0 < err < 0.01  # quantized, and close
    assert torch.equal(head(h).float(), dense)  # 12 rows > max_batch: the dense weight


def test_float32_layers_keep_the_packed_copy_in_the_fused_kernels_format():
    from sglang.srt.layers.q4_packed import F32_MAX_BATCH

    w = np.random.default_rng(4).standard_normal((64, 128)).astype(np.float32)
    raw = quantize(w, gguf.GGMLQuantizationType.Q4_1)
    col = ColumnParallelLinear(128, [64], False, 1, 0, torch.float32)
    col.load([torch.from_numpy(dequantize(raw, gguf.GGMLQuantizationType.Q4_1).copy())])
    col.load_q4([q4_blocks(raw, "Q4_1", 128)], max_batch=16)
    nib, sm = col.q4
    assert nib.dtype == torch.uint8 and nib.shape == (64, 64) and sm.dtype == torch.float32 and sm.shape == (64, 4, 2)
    assert col.q4_max_batch == F32_MAX_BATCH  # the kernel's row limit; the dense product takes over above it
    x = torch.randn(2, 128)
    assert torch.equal(col(x), x @ col.weight.t())  # the eager path keeps the dense product


