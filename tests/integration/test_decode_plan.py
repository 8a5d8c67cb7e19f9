"""The decode plan of the fused CPU step against the eager step (builds the kernels: needs g++)."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
import torch
from gguf.quants import dequantize, quantize

from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
from sglang.srt.layers.cpu_kernels import load_decode_kernels
from sglang.srt.layers.onednn_linear import packs, prepack_linear_weights
from sglang.srt.layers.q4_packed import q4_blocks
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.models.llama import LlamaForCausalLM

pytestmark = [pytest.mark.compiler]


PAGE = 16
SLOTS = 4096


class _Runner:
    """What the attention backend reads of its runner: the pool."""

    def __init__(self, pool: MHATokenToKVPool) -> None:
        self.kv_pool = pool


def make_model(dtype: torch.dtype, heads: int, kv_heads: int, bias: bool, q4: bool, seed: int, onednn: bool = False,
               tied: bool = False) -> LlamaForCausalLM:
    cfg = ModelConfig("LlamaForCausalLM", hidden_size=128, num_hidden_layers=3, num_attention_heads=heads, num_key_value_heads=kv_heads,
                      head_dim=32, intermediate_size=256, vocab_size=300, rope_theta=10000.0, rms_norm_eps=1e-5,
                      max_position_embeddings=1024, tie_word_embeddings=tied, attention_bias=bias)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg, (1, 0), dtype)
    for name, p in model.named_parameters():
        p.data.copy_(1 + 0.1 * torch.randn_like(p, dtype=torch.float32) if "norm" in name else 0.08 * torch.randn_like(p, dtype=torch.float32))
    if q4:
        rng = np.random.default_rng(seed)
        for layer in model.layers:
            for lin in (layer.self_attn.qkv_proj, layer.self_attn.o_proj, layer.mlp.gate_up_proj, layer.mlp.down_proj):
                w = (0.08 * rng.standard_normal(tuple(lin.weight.shape))).astype(np.float32)
                raw = quantize(w, gguf.GGMLQuantizationType.Q4_1)
                lin.weight.data.copy_(torch.from_numpy(dequantize(raw, gguf.GGMLQuantizationType.Q4_1).copy()))  # what the loader holds
                blocks = q4_blocks(raw, "Q4_1", w.shape[1])
                lin.load_q4([blocks] if hasattr(lin, "part_sizes") else blocks, max_batch=8)
    if onednn:
        # bfloat16 packs only where oneDNN has a bfloat16 path (not on an AVX2-only CPU): then the plan runs the dense weights
        assert prepack_linear_weights(model, batch_hint=64) == (4 * cfg.num_hidden_layers + 1 if packs(dtype) else 0)
    return model.eval()


def decode_batch(batch: int, gen: torch.Generator) -> tuple[ForwardBatch, list[int]]:
    """One decode token per request after a random prefix, on scattered pages."""
    prefix = torch.randint(1, 90, (batch,), generator=gen).tolist()
    width = -(-(max(prefix) + 1) // PAGE)
    pages = torch.randperm(SLOTS // PAGE - 1, generator=gen)[: batch * width].view(batch, width) + 1
    slots = (pages[:, :, None] * PAGE + torch.arange(PAGE)).reshape(batch, width * PAGE)
    lens = torch.tensor(prefix) + 1
    fb = ForwardBatch(ForwardMode.DECODE, torch.randint(0, 300, (batch,), generator=gen), lens - 1, slots[torch.arange(batch), lens - 1],
                      prefix, [1] * batch, torch.arange(batch), kv_index=slots, kv_lens=lens)
    return fb, prefix


@pytest.fixture(scope="module")
def kernels():
    return load_decode_kernels()


CASES = [
    # dtype, heads, kv_heads, bias, q4, onednn
    (torch.float32, 4, 2, False, False, False),
    (torch.float32, 4, 4, True, False, False),
    (torch.float32, 4, 2, True, False, True),
    (torch.float32, 6, 2, False, True, True),  # the plan's float32 Q4 kernel up to 8 rows, oneDNN above
    (torch.bfloat16, 4, 2, False, False, False),
    (torch.bfloat16, 6, 2, True, False, False),
    (torch.bfloat16, 4, 2, False, True, False),
    (torch.bfloat16, 6, 2, True, True, True),
]


@pytest.mark.parametrize("batch", [1, 3, 4, 8, 37])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{str(c[0])[6:]}-h{c[1]}kv{c[2]}{'-bias' if c[3] else ''}{'-q4' if c[4] else ''}{'-onednn' if c[5] else ''}")
def test_plan_equals_the_eager_step(kernels, case, batch):
    dtype, heads, kv_heads, bias, q4, onednn = case
    model = make_model(dtype, heads, kv_heads, bias, q4, seed=batch, onednn=onednn)
    pool = MHATokenToKVPool(SLOTS, PAGE, dtype, kv_heads, 32, 3, "cpu")
    gen = torch.Generator().manual_seed(100 + batch)
    for i in range(3):  # the cached prefix: random K/V already in the pool
        pool.k_buffer[i].copy_(torch.randn(pool.k_buffer[i].shape, generator=gen))
        pool.v_buffer[i].copy_(torch.randn(pool.v_buffer[i].shape, generator=gen))
    fb, _ = decode_batch(batch, gen)
    before = [(k.clone(), v.clone()) for k, v in zip(pool.k_buffer, pool.v_buffer)]

    attn = TorchNativeAttnBackend(_Runner(pool))
    with torch.inference_mode():
        attn.init_forward_metadata(fb)
        want = model.forward(fb.input_ids, fb.positions, fb, attn).float()
        want_kv = [(k.clone(), v.clone()) for k, v in zip(pool.k_buffer, pool.v_buffer)]
        for (k, v), (k0, v0) in zip(zip(pool.k_buffer, pool.v_buffer), before):
            k.copy_(k0)
            v.copy_(v0)
        got = model.forward_decode_plan(model.build_decode_plan(kernels, pool), fb).float()

    tol = 1e-4 if dtype == torch.float32 else 3e-2
    torch.testing.assert_close(got, want, atol=tol * want.abs().max().item(), rtol=0)
    assert (got.argmax(-1) == want.argmax(-1)).float().mean() >= (1.0 if dtype == torch.float32 else 0.9)
    loc = fb.out_cache_loc
    for layer, ((k, v), (wk, wv), (k0, _)) in enumerate(zip(zip(pool.k_buffer, pool.v_buffer), want_kv, before)):
        untouched = torch.ones(SLOTS, dtype=torch.bool)
        untouched[loc] = False
        assert torch.equal(k[untouched], k0[untouched]), "the plan wrote K outside the new tokens' slots"
        kv_tol = 1e-5 if dtype == torch.float32 else 2 ** -7 * (layer + 1)  # bf16: within a rounding step, growing with depth
        torch.testing.assert_close(k[loc].float(), wk[loc].float(), atol=kv_tol * 4, rtol=kv_tol)
        torch.testing.assert_close(v[loc].float(), wv[loc].float(), atol=kv_tol * 4, rtol=kv_tol)


def test_layer_zero_kv_is_bit_exact_in_bfloat16(kernels):
    """Layer 0 sees the same input in both paths: rotary and the KV write round exactly like the eager ops."""
    model = make_model(torch.bfloat16, 4, 2, True, False, seed=7)
    pool = MHATokenToKVPool(SLOTS, PAGE, torch.bfloat16, 2, 32, 3, "cpu")
    fb, _ = decode_batch(5, torch.Generator().manual_seed(7))
    attn = TorchNativeAttnBackend(_Runner(pool))
    with torch.inference_mode():
        attn.init_forward_metadata(fb)
        model.forward(fb.input_ids, fb.positions, fb, attn)
        want_k, want_v = pool.k_buffer[0][fb.out_cache_loc].clone(), pool.v_buffer[0][fb.out_cache_loc].clone()
        pool.k_buffer[0].zero_()
        pool.v_buffer[0].zero_()
        model.forward_decode_plan(model.build_decode_plan(kernels, pool), fb)
    assert torch.equal(pool.k_buffer[0][fb.out_cache_loc], want_k)
    assert torch.equal(pool.v_buffer[0][fb.out_cache_loc], want_v)


def test_plan_rejects_indices_outside_the_pool(kernels):
    model = make_model(torch.float32, 4, 2, False, False, seed=1)
    pool = MHATokenToKVPool(SLOTS, PAGE, torch.float32, 2, 32, 3, "cpu")
    plan = model.build_decode_plan(kernels, pool)
    fb, _ = decode_batch(2, torch.Generator().manual_seed(1))
    fb.out_cache_loc = torch.tensor([0, SLOTS])
    with pytest.raises(RuntimeError, match=f"out_loc\\[1\\] = {SLOTS} is outside the pool of {SLOTS} slots"):
        model.forward_decode_plan(plan, fb)
    fb, _ = decode_batch(2, torch.Generator().manual_seed(2))
    fb.kv_lens = fb.kv_lens + fb.kv_index.shape[1]
    with pytest.raises(RuntimeError, match="kv_lens\\[0\\] = .* is outside"):
        model.forward_decode_plan(plan, fb)


def test_plan_refuses_a_head_size_it_cannot_vectorize(kernels):
    with pytest.raises(RuntimeError, match="head size that is a multiple of 16, got 24"):
        kernels.DecodePlan(4, 2, 24, 1e-5)


@pytest.mark.parametrize("batch", [1, 3, 8, 9])
def test_a_tied_float32_head_runs_on_its_q8_0_blocks_up_to_eight_rows(kernels, batch):
    # the embedding's exact Q8_0 blocks stand in for the LM head's oneDNN copy at small batches
    from sglang.srt.layers.q4_packed import q8_blocks

    model = make_model(torch.float32, 4, 2, False, False, seed=batch, tied=True)
    w = (0.08 * np.random.default_rng(batch).standard_normal((300, 128))).astype(np.float32)
    raw = quantize(w, gguf.GGMLQuantizationType.Q8_0)
    model.embed_tokens.weight.data.copy_(torch.from_numpy(dequantize(raw, gguf.GGMLQuantizationType.Q8_0).copy()))
    prepack_linear_weights(model, batch_hint=64, embed_q8=q8_blocks(raw, 128))
    pool = MHATokenToKVPool(SLOTS, PAGE, torch.float32, 2, 32, 3, "cpu")
    gen = torch.Generator().manual_seed(batch)
    fb, _ = decode_batch(batch, gen)
    plan = model.build_decode_plan(kernels, pool)
    assert plan.lm_head_max_batch() == 8
    attn = TorchNativeAttnBackend(_Runner(pool))
    with torch.inference_mode():
        attn.init_forward_metadata(fb)
        want = model.forward(fb.input_ids, fb.positions, fb, attn)
        got = model.forward_decode_plan(plan, fb)
    assert got.shape == want.shape == (batch, 300)
    torch.testing.assert_close(got, want, atol=1e-4 * want.abs().max().item(), rtol=0)
