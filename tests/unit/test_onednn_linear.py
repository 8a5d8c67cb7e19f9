"""oneDNN-packed linear layers: same products as ``F.linear``, dense weights dropped, tied embeddings kept."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from sglang.srt.layers.onednn_linear import available, packs, prepack_linear_weights
from sglang.srt.layers.parallel import ColumnParallelLinear, ParallelLMHead, RowParallelLinear, VocabParallelEmbedding


def test_the_pinned_torch_has_onednn():
    assert available()  # the CPU wheel the Makefile pins; without it the runner keeps dense weights


def _layers(dtype: torch.dtype) -> torch.nn.ModuleDict:
    torch.manual_seed(0)
    emb = VocabParallelEmbedding(300, 64, 1, 0, dtype)
    mods = torch.nn.ModuleDict({
        "col": ColumnParallelLinear(64, [96, 32], True, 1, 0, dtype),
        "row": RowParallelLinear(128, 64, 1, 0, dtype),
        "emb": emb,
        "tied": ParallelLMHead(emb, True, 64, dtype),
    })
    for p in mods.parameters():
        p.data.copy_(0.1 * torch.randn_like(p, dtype=torch.float32))
    return mods


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_packed_products_equal_the_dense_ones(dtype):
    mods = _layers(dtype)
    xs = {"col": torch.randn(5, 64).to(dtype), "row": torch.randn(5, 128).to(dtype), "tied": torch.randn(5, 64).to(dtype)}
    with torch.inference_mode():
        want = {k: mods[k](x) for k, x in xs.items()}
        dense_emb = mods["emb"].weight.clone()
        # bfloat16 packs only where oneDNN has a bfloat16 path (not on an AVX2-only CPU): then nothing is packed
        assert prepack_linear_weights(mods, batch_hint=64) == (3 if packs(dtype) else 0)
        assert (mods["col"].onednn is not None) == packs(dtype)
        got = {k: mods[k](x) for k, x in xs.items()}
    for k in xs:
        if dtype == torch.bfloat16:  # the same oneDNN kernel F.linear calls for bfloat16, on a packed copy
            assert torch.equal(got[k], want[k]), k
        else:  # MKL's sgemm against oneDNN: summation order only
            torch.testing.assert_close(got[k], want[k], atol=1e-5, rtol=1e-5)
    assert torch.equal(mods["emb"].weight, dense_emb), "a tied LM head must leave the embedding's weight dense"


def test_packing_drops_the_dense_weight_and_keeps_its_shape():
    mods = _layers(torch.float32)
    shape = mods["col"].weight.shape
    prepack_linear_weights(mods, batch_hint=64)
    assert mods["col"].weight.is_meta and mods["col"].weight.shape == shape
    assert mods["row"].weight.is_meta
    assert mods["col"].onednn is not None and mods["col"].onednn.is_mkldnn


def test_packing_twice_is_a_no_op_on_dropped_weights():
    mods = _layers(torch.float32)
    assert prepack_linear_weights(mods, batch_hint=64) == 3
    assert prepack_linear_weights(mods, batch_hint=64) == 1  # only the tied head still has a dense weight, the embedding's


def test_an_untied_head_drops_its_own_weight():
    emb = VocabParallelEmbedding(300, 64, 1, 0, torch.float32)
    head = ParallelLMHead(emb, False, 64, torch.float32)
    head.weight.data.normal_()
    x = torch.randn(3, 64)
    want = F.linear(x, head.weight)
    prepack_linear_weights(head, batch_hint=64)
    assert head.weight.is_meta and not emb.weight.is_meta
    torch.testing.assert_close(head(x), want, atol=1e-5, rtol=1e-5)


def _q8_matrix(rows: int, cols: int):
    import gguf
    import numpy as np
    from gguf.quants import dequantize, quantize

    from sglang.srt.layers.q4_packed import q8_blocks

    w = np.random.default_rng(5).standard_normal((rows, cols)).astype(np.float32)
    raw = quantize(w, gguf.GGMLQuantizationType.Q8_0)
    return q8_blocks(raw, cols), torch.from_numpy(dequantize(raw, gguf.GGMLQuantizationType.Q8_0).copy())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_q8_rows_are_the_gguf_dequantization_bit_for_bit(dtype):
    from sglang.srt.layers.q4_packed import q8_rows

    (q, scale), dense = _q8_matrix(300, 64)
    ids = torch.tensor([[0, 299, 17], [5, 5, 123]])
    assert torch.equal(q8_rows(q, scale, ids, dtype), dense.to(dtype)[ids])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_tied_head_with_q8_blocks_drops_the_dense_embedding_and_keeps_every_result(dtype):
    (q, scale), dense = _q8_matrix(300, 64)
    emb = VocabParallelEmbedding(300, 64, 1, 0, dtype)
    emb.load(dense)
    head = ParallelLMHead(emb, True, 64, dtype)
    model = torch.nn.ModuleDict({"emb": emb, "head": head})
    ids, h = torch.tensor([3, 299, 0, 42]), torch.randn(4, 64).to(dtype)
    want_rows, want_logits = emb(ids), head(h)
    prepack_linear_weights(model, batch_hint=64, embed_q8=(q, scale))
    # the Q8 lookup replaces the embedding only when the head was packed (bfloat16 needs oneDNN's bfloat16 path)
    assert emb.weight.is_meta == packs(dtype) and head.weight is emb.weight
    assert torch.equal(emb(ids), want_rows)
    if dtype == torch.bfloat16:
        assert torch.equal(head(h), want_logits)
    else:
        torch.testing.assert_close(head(h), want_logits, atol=1e-5, rtol=1e-5)


def test_a_tensor_parallel_shard_keeps_its_own_rows_of_the_q8_blocks():
    (q, scale), _ = _q8_matrix(301, 64)  # 301 rows over 2 ranks: shards of 151, the last padded by one row
    emb = VocabParallelEmbedding(301, 64, 2, 1, torch.float32)
    emb.set_q8(q, scale)
    sq, ss = emb.q8
    assert sq.shape == (151, 64) and ss.shape == (151, 2)
    assert torch.equal(sq[:150], q[151:]) and torch.equal(ss[:150], scale[151:])
    assert not sq[150].any() and not ss[150].any()
