"""The weight-format pass: one kernel object per linear layer, by format, dtype and batch size.

These cases need no compiler (oneDNN, torch's int4 and int8 kernels); the float32 Q4 / Q8_0 kernels
are tested in tests/integration/test_weight_format_kernels.py.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from helpers.tiny_llama import apply_weight_format, q4_checkpoint, q8_embedding, tiny_llama
from sglang.srt.layers import linear_kernels as lk
from sglang.srt.layers.onednn_linear import available, packs
from sglang.srt.layers.parallel import ColumnParallelLinear, RowParallelLinear
from sglang.srt.model_executor.weight_format import _q4_blocks, _sources


def test_the_pinned_torch_has_onednn():
    assert available()  # the CPU wheel the Makefile pins; without it dense weights stay F.linear


def _linears(model) -> list:
    return [m for m in model.modules() if isinstance(m, (ColumnParallelLinear, RowParallelLinear))]


def test_checkpoint_names_of_fused_modules_come_from_the_models_mapping():
    model = tiny_llama(torch.float32)
    assert _sources(model, "layers.1.self_attn.qkv_proj") == [f"model.layers.1.self_attn.{x}_proj.weight" for x in "qkv"]
    assert _sources(model, "layers.0.mlp.gate_up_proj") == ["model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight"]
    assert _sources(model, "layers.2.mlp.down_proj") == ["model.layers.2.mlp.down_proj.weight"]


def test_dense_float32_layers_are_packed_once_and_compute_the_same_logits():
    model = tiny_llama(torch.float32, tied=False)
    h = torch.randn(5, 128)
    lins = _linears(model)
    xs = [torch.randn(5, lin.weight.shape[1]) for lin in lins]
    with torch.inference_mode():
        want = [lin(x) for lin, x in zip(lins, xs)] + [model.lm_head(h)]
        fmt = apply_weight_format(model, None, None, None)
        got = [lin(x) for lin, x in zip(lins, xs)] + [model.lm_head(h)]
    assert set(fmt.layers.values()) == {"onednn"} and len(fmt.layers) == 4 * 3 + 1 and fmt.dense_dropped
    assert all(tuple(lin.weight.shape) == (lin.kernel.out_features, lin.kernel.in_features) for lin in lins)  # shape kept on meta
    assert all(lin.weight.is_meta for lin in lins) and model.lm_head.weight.is_meta and not model.embed_tokens.weight.is_meta
    for g, w in zip(got, want):  # MKL's sgemm against oneDNN: summation order only
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)


def test_a_tied_head_with_q8_blocks_looks_rows_up_exactly_and_drops_every_dense_copy():
    model = tiny_llama(torch.float32, tied=True)
    q8 = q8_embedding(model, seed=3)
    ids, h = torch.tensor([3, 299, 0, 42]), torch.randn(4, 128)
    with torch.inference_mode():
        want_rows, want_logits = model.embed_tokens(ids), model.lm_head(h)
        fmt = apply_weight_format(model, None, q8, None)
        assert torch.equal(model.embed_tokens(ids), want_rows)
        torch.testing.assert_close(model.lm_head(h), want_logits, atol=1e-5, rtol=1e-5)
    assert fmt.layers["lm_head"] == "onednn" and model.embed_tokens.weight.is_meta and model.lm_head.weight.is_meta


def test_a_tied_head_without_q8_blocks_keeps_the_embedding_dense():
    model = tiny_llama(torch.float32, tied=True)
    dense = model.embed_tokens.weight.clone()
    apply_weight_format(model, None, None, None)
    assert torch.equal(model.embed_tokens.weight, dense) and model.lm_head.kernel.kind == "onednn"


def test_bfloat16_q4_uses_the_int4_kernel_up_to_max_batch_then_dense():
    model = tiny_llama(torch.bfloat16)
    blocks = q4_checkpoint(model, seed=1)
    lin = model.layers[0].mlp.gate_up_proj
    dense_w = lin.weight.detach().float().clone()
    fmt = apply_weight_format(model, blocks, None, "gguf_q4", max_batch=4)
    rest = "onednn" if packs(torch.bfloat16) else "dense"
    assert fmt.layers["layers.0.mlp.gate_up_proj"] == f"int4_bf16 (<= 4 rows), {rest} (more rows)"
    assert fmt.layers["lm_head"] == f"int8_rows (<= 4 rows), {rest} (more rows)"
    assert [lk.kernel_for_batch(lin.kernel, n) for n in (1, 4, 5, 64)] == ["int4_bf16", "int4_bf16", rest, rest]
    assert not blocks, "the pass consumes the blocks it was given"
    x = torch.randn(6, 128).to(torch.bfloat16)
    with torch.inference_mode():
        small, big = lin(x[:4]).float(), lin(x).float()
    ref = x.float() @ dense_w.t()
    torch.testing.assert_close(small, ref[:4], atol=0.1, rtol=0.02)  # bfloat16 scales and activations
    torch.testing.assert_close(big, ref, atol=0.1, rtol=0.02)
    assert not torch.equal(small, big[:4]), "4 rows and 6 rows ran different kernels"


def test_a_row_parallel_shard_that_splits_a_block_stays_dense():
    model = tiny_llama(torch.float32)
    blocks = q4_checkpoint(model, seed=2)
    for rank in (0, 1, 15):  # 16 ranks of 256 inputs: 16 columns each, half a block (rank 0 starts aligned, ends mid-block)
        row = RowParallelLinear(256, 128, 16, rank, torch.float32)
        assert _q4_blocks(row, blocks, ["model.layers.0.mlp.down_proj.weight"]) is None
    row2 = RowParallelLinear(256, 128, 2, 1, torch.float32)
    q, scale, mn = _q4_blocks(row2, blocks, ["model.layers.0.mlp.down_proj.weight"])
    full = blocks["model.layers.0.mlp.down_proj.weight"]
    assert torch.equal(q, full[0][:, 128:]) and torch.equal(scale, full[1][:, 4:]) and torch.equal(mn, full[2][:, 4:])


def test_a_column_parallel_shard_takes_its_rows_of_every_part():
    model = tiny_llama(torch.float32)
    blocks = q4_checkpoint(model, seed=4)
    col = ColumnParallelLinear(128, [128, 64, 64], False, 2, 1, torch.float32)
    names = _sources(model, "layers.0.self_attn.qkv_proj")
    q, _, _ = _q4_blocks(col, blocks, names)
    parts = [blocks[n][0] for n in names]
    assert torch.equal(q, torch.cat([parts[0][64:], parts[1][32:], parts[2][32:]]))


def test_a_layer_with_a_missing_part_keeps_dense_weights():
    model = tiny_llama(torch.bfloat16)
    blocks = q4_checkpoint(model, seed=5)
    del blocks["model.layers.1.self_attn.k_proj.weight"]  # e.g. a GGUF whose k_proj is Q8_0
    fmt = apply_weight_format(model, blocks, None, "gguf_q4")
    assert fmt.layers["layers.1.self_attn.qkv_proj"] in ("onednn", "dense")
    assert fmt.layers["layers.0.self_attn.qkv_proj"].startswith("int4_bf16")


def test_hooks_on_weight_readers_keep_every_layer_dense():
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType
    from sglang.testing.plugins import restored_hooks

    model = tiny_llama(torch.float32)
    x = torch.randn(2, 128)
    with restored_hooks():
        HookRegistry.register("sglang.srt.layers.parallel.ColumnParallelLinear.forward", lambda *a, **k: None, HookType.BEFORE)
        HookRegistry.apply_hooks()
        fmt = apply_weight_format(model, q4_checkpoint(model, seed=6), None, "gguf_q4")
        y = model.layers[0].mlp.gate_up_proj(x)
    assert fmt.kept_dense_for == ["sglang.srt.layers.parallel.ColumnParallelLinear.forward"] and not fmt.layers
    assert not fmt.dense_dropped and all(lin.kernel is None and not lin.weight.is_meta for lin in _linears(model))
    torch.testing.assert_close(y, F.linear(x, model.layers[0].mlp.gate_up_proj.weight))


def test_by_size_needs_bounded_tiers_then_an_unbounded_kernel():
    w = torch.randn(8, 32)
    with pytest.raises(AssertionError):
        lk.BySize([lk.Dense(w)], lk.Dense(w))  # the first tier takes any batch: nothing would reach the rest
