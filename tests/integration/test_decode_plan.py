"""The decode plan of the fused CPU step against the eager step (builds the kernels: needs g++)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from helpers.tiny_llama import apply_weight_format, q4_checkpoint, q8_embedding, tiny_llama
from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
from sglang.srt.layers.cpu_kernels import load_decode_kernels
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
    """A tiny random model; ``q4``: Q4_1 weights under ``gguf_q4``, ``onednn``: dense weights through the
    weight-format pass (oneDNN-packed where this CPU packs the dtype); neither: plain dense weights."""
    model = tiny_llama(dtype, heads, kv_heads, bias, seed, tied)
    if q4:
        apply_weight_format(model, q4_checkpoint(model, seed), None, "gguf_q4")
    elif onednn:
        apply_weight_format(model, None, None, None)
    return model


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


@pytest.fixture(autouse=True)
def exact_gguf_math(monkeypatch):
    # the float32 GGUF kernels (exact weights): these tests compare with dense float32 to its rounding;
    # the int8 kernels (the default where measured faster) are tested in test_integer_kernels.py
    monkeypatch.setenv("SGLANG_CPU_GGUF_MATH", "float32")


CASES = [
    # dtype, heads, kv_heads, bias, q4, onednn
    (torch.float32, 4, 2, False, False, False),
    (torch.float32, 4, 4, True, False, False),
    (torch.float32, 4, 2, True, False, True),
    (torch.float32, 6, 2, False, True, True),  # float32 Q4 blocks at every batch size (q4_f32)
    (torch.bfloat16, 4, 2, False, False, False),
    (torch.bfloat16, 6, 2, True, False, False),
    (torch.bfloat16, 4, 2, False, True, False),
    (torch.bfloat16, 6, 2, True, True, True),
]


@dataclass
class Compared:
    """One decode step run eagerly and then through the plan from the same pool state."""

    fb: ForwardBatch
    pool: MHATokenToKVPool
    before: list[tuple[torch.Tensor, torch.Tensor]]  # each layer's K/V before the step
    want: torch.Tensor  # the eager logits
    want_kv: list[tuple[torch.Tensor, torch.Tensor]]  # each layer's K/V after the eager step
    got: torch.Tensor  # the plan's logits (the pool then holds the plan's K/V)


def eager_then_plan(kernels, model: LlamaForCausalLM, kv_dtype: torch.dtype, kv_heads: int, batch: int, seed: int,
                    head_dim: int = 32) -> Compared:
    """A pool whose cached prefix is random K/V, one decode step of ``batch`` requests through the eager model, the
    pool restored, and the same step through the plan."""
    pool = MHATokenToKVPool(SLOTS, PAGE, kv_dtype, kv_heads, head_dim, 3, "cpu")
    gen = torch.Generator().manual_seed(seed)
    for i in range(3):
        pool.k_buffer[i].copy_(torch.randn(pool.k_buffer[i].shape, generator=gen))
        pool.v_buffer[i].copy_(torch.randn(pool.v_buffer[i].shape, generator=gen))
    fb, _ = decode_batch(batch, gen)
    before = [(k.clone(), v.clone()) for k, v in zip(pool.k_buffer, pool.v_buffer)]
    attn = TorchNativeAttnBackend(_Runner(pool))
    with torch.inference_mode():
        attn.init_forward_metadata(fb)
        want = model.forward(fb.input_ids, fb.positions, fb, attn)
        want_kv = [(k.clone(), v.clone()) for k, v in zip(pool.k_buffer, pool.v_buffer)]
        for (k, v), (k0, v0) in zip(zip(pool.k_buffer, pool.v_buffer), before):
            k.copy_(k0)
            v.copy_(v0)
        got = model.forward_decode_plan(model.build_decode_plan(kernels, pool), fb)
    return Compared(fb, pool, before, want, want_kv, got)


@pytest.mark.parametrize("batch", [1, 3, 4, 8, 37])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{str(c[0])[6:]}-h{c[1]}kv{c[2]}{'-bias' if c[3] else ''}{'-q4' if c[4] else ''}{'-onednn' if c[5] else ''}")
def test_plan_equals_the_eager_step(kernels, case, batch):
    dtype, heads, kv_heads, bias, q4, onednn = case
    model = make_model(dtype, heads, kv_heads, bias, q4, seed=batch, onednn=onednn)
    c = eager_then_plan(kernels, model, dtype, kv_heads, batch, seed=100 + batch)
    got, want = c.got.float(), c.want.float()
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    torch.testing.assert_close(got, want, atol=tol * want.abs().max().item(), rtol=0)
    assert (got.argmax(-1) == want.argmax(-1)).float().mean() >= (1.0 if dtype == torch.float32 else 0.9)
    loc = c.fb.out_cache_loc
    for layer, ((k, v), (wk, wv), (k0, _)) in enumerate(zip(zip(c.pool.k_buffer, c.pool.v_buffer), c.want_kv, c.before)):
        untouched = torch.ones(SLOTS, dtype=torch.bool)
        untouched[loc] = False
        assert torch.equal(k[untouched], k0[untouched]), "the plan wrote K outside the new tokens' slots"
        kv_tol = 1e-5 if dtype == torch.float32 else 2 ** -7 * (layer + 1)  # bf16: within a rounding step, growing with depth
        torch.testing.assert_close(k[loc].float(), wk[loc].float(), atol=kv_tol * 4, rtol=kv_tol)
        torch.testing.assert_close(v[loc].float(), wv[loc].float(), atol=kv_tol * 4, rtol=kv_tol)


@pytest.mark.parametrize("batch", [1, 5, 33])
@pytest.mark.parametrize("kv_dtype", [torch.float32, torch.bfloat16], ids=["kv-f32", "kv-bf16"])
@pytest.mark.parametrize("shape", [(10, 2, 32), (4, 2, 48), (8, 1, 16)], ids=lambda s: f"h{s[0]}kv{s[1]}d{s[2]}")
def test_attention_shapes(kernels, shape, kv_dtype, batch):
    # the attention's register-blocked loops: 5 and 8 query heads per KV head (blocks of 4 and a rest), head sizes
    # of 6 and 2 vectors (a 4-vector chunk and a 2-vector rest where AVX-512 takes 4 at a time), a float32 and a
    # bfloat16 cache, one KV head per task (few requests) and all of a request's heads per task (32 and more)
    heads, kv_heads, head_dim = shape
    model = tiny_llama(torch.float32, heads, kv_heads, seed=batch, head_dim=head_dim)
    c = eager_then_plan(kernels, model, kv_dtype, kv_heads, batch, seed=200 + batch, head_dim=head_dim)
    if kv_dtype == torch.bfloat16:  # the eager step rounds K/V to the cache dtype too: only the sums' order differs
        torch.testing.assert_close(c.got, c.want, atol=1e-3 * c.want.abs().max().item(), rtol=0)
    else:
        torch.testing.assert_close(c.got, c.want, atol=1e-4 * c.want.abs().max().item(), rtol=0)
    assert torch.equal(c.got.argmax(-1), c.want.argmax(-1))


@pytest.mark.parametrize("batch", [1, 4, 37])
@pytest.mark.parametrize("q4", [False, True], ids=["dense", "q4"])
def test_a_bfloat16_kv_cache_under_a_float32_model_equals_the_eager_step(kernels, q4, batch):
    """``--kv-cache-dtype bfloat16`` on a float32 model: both paths round the new K/V to bfloat16 once, after the
    rotary, and widen the cached rows back to float32 exactly; the rest is float32 arithmetic."""
    c = eager_then_plan(kernels, make_model(torch.float32, 6, 2, False, q4, seed=batch), torch.bfloat16, 2, batch, seed=200 + batch)
    assert c.got.dtype == c.want.dtype == torch.float32 and c.pool.k_buffer[0].dtype == torch.bfloat16
    # a new K/V value on a bfloat16 rounding boundary may round either way (float32 sums in another order): one step
    torch.testing.assert_close(c.got, c.want, atol=2e-3 * c.want.abs().max().item(), rtol=0)
    assert (c.got.argmax(-1) == c.want.argmax(-1)).all()
    loc = c.fb.out_cache_loc
    for (k, v), (wk, wv) in zip(zip(c.pool.k_buffer, c.pool.v_buffer), c.want_kv):
        torch.testing.assert_close(k[loc].float(), wk[loc].float(), atol=2**-6, rtol=2**-7)
        torch.testing.assert_close(v[loc].float(), wv[loc].float(), atol=2**-6, rtol=2**-7)


@pytest.mark.parametrize("batch", [9, 37])
def test_the_bf16_driver_on_a_bfloat16_kv_cache_keeps_the_eager_steps_logits(kernels, monkeypatch, batch):
    """The ``bf16`` arithmetic (the amx family's pick above 8 rows) on the default's bfloat16 KV cache runs the
    plan's bf16 driver (bf16_step.h): each product's input is rounded to bfloat16 once and its bfloat16 output read
    as it is, as the eager layers' ``x.to(bfloat16)`` and ``.to(float32)`` do; a qkv bias is added after."""
    from sglang.srt.layers.onednn_linear import packs

    if not packs(torch.bfloat16):
        pytest.skip("the bf16 arithmetic: oneDNN has no bfloat16 GEMM on this CPU (it needs AVX-512 BF16 or AMX)")
    monkeypatch.setenv("SGLANG_CPU_GGUF_MATH", "bf16")
    model = make_model(torch.float32, 6, 2, True, True, seed=batch)
    c = eager_then_plan(kernels, model, torch.bfloat16, 2, batch, seed=300 + batch)
    assert model.build_decode_plan(kernels, c.pool).driver(batch) == "bf16"
    # an activation a float32 rounding apart (the attention's or the SiLU's) may round to the neighbouring bfloat16
    rel = [((g - w).norm() / w.norm()).item() for g, w in zip(c.got, c.want)]
    assert max(rel) < 0.01 and sorted(rel)[len(rel) // 2] < 2e-3, rel
    assert (c.got.argmax(-1) == c.want.argmax(-1)).float().mean() >= 0.9
    loc = c.fb.out_cache_loc
    for (k, v), (wk, wv) in zip(zip(c.pool.k_buffer, c.pool.v_buffer), c.want_kv):
        torch.testing.assert_close(k[loc].float(), wk[loc].float(), atol=2**-5, rtol=2**-6)
        torch.testing.assert_close(v[loc].float(), wv[loc].float(), atol=2**-5, rtol=2**-6)


def test_the_plan_refuses_a_kv_cache_dtype_it_does_not_read(kernels):
    model = make_model(torch.bfloat16, 4, 2, False, False, seed=3)
    pool = MHATokenToKVPool(SLOTS, PAGE, torch.float32, 2, 32, 3, "cpu")
    with pytest.raises(RuntimeError, match="bfloat16 under a float32 model"):
        model.build_decode_plan(kernels, pool)


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


@pytest.mark.parametrize("batch", [1, 3, 8, 9, 37])
def test_the_default_format_keeps_the_dense_models_logits(kernels, batch):
    # float32 Q4 layers and a tied Q8_0 head (what --quantization auto gives a Q4 GGUF) against the
    # same dequantized weights held dense: exact weights, so only the summation order differs
    model = tiny_llama(torch.float32, 4, 2, False, seed=batch, tied=True)
    blocks, q8 = q4_checkpoint(model, batch), q8_embedding(model, batch)
    pool = MHATokenToKVPool(SLOTS, PAGE, torch.float32, 2, 32, 3, "cpu")
    fb, _ = decode_batch(batch, torch.Generator().manual_seed(batch))
    attn = TorchNativeAttnBackend(_Runner(pool))
    with torch.inference_mode():
        attn.init_forward_metadata(fb)
        want = model.forward(fb.input_ids, fb.positions, fb, attn)
        fmt = apply_weight_format(model, blocks, q8, "gguf_q4")
        got = model.forward_decode_plan(model.build_decode_plan(kernels, pool), fb)
    assert set(fmt.layers.values()) == {"q4_f32", "q8_f32"} and fmt.layers["lm_head"] == "q8_f32"
    assert all(p.is_meta for n, p in model.named_parameters() if "proj" in n or "embed" in n)
    assert got.shape == want.shape == (batch, 300)
    torch.testing.assert_close(got, want, atol=1e-4 * want.abs().max().item(), rtol=0)
    assert torch.equal(got.argmax(-1), want.argmax(-1))


@pytest.mark.parametrize("rows", [1, 2, 7, 8, 9, 16, 37, 64])
def test_the_packed_float32_kernels_equal_the_dense_product(kernels, rows):
    import gguf
    import numpy as np
    from gguf.quants import dequantize, quantize

    from sglang.srt.layers.linear_kernels import Q4F32, Q8F32
    from sglang.srt.layers.q4_packed import pack_f32, q4_blocks, q8_blocks

    rng = np.random.default_rng(rows)
    w = rng.standard_normal((67, 256)).astype(np.float32)  # 67 outputs: four full 16-column blocks and a partial one
    x = torch.randn(rows, 256)
    raw4, raw8 = quantize(w, gguf.GGMLQuantizationType.Q4_1), quantize(w, gguf.GGMLQuantizationType.Q8_0)
    d4 = torch.from_numpy(dequantize(raw4, gguf.GGMLQuantizationType.Q4_1).copy())
    d8 = torch.from_numpy(dequantize(raw8, gguf.GGMLQuantizationType.Q8_0).copy())
    bias = torch.randn(67)
    y4 = Q4F32(*pack_f32(*q4_blocks(raw4, "Q4_1", 256)))(x, bias)
    y8 = Q8F32(*q8_blocks(raw8, 256))(x, None)
    torch.testing.assert_close(y4, x @ d4.t() + bias, atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(y8, x @ d8.t(), atol=1e-4, rtol=1e-5)
