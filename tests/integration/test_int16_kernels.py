"""The int16-activation GGUF kernels (q4_linear_i16, q8_linear_i16) of every kernel family this CPU has, and
the ``mixed16`` arithmetic built on them (needs g++).

Each family's library is checked against an exact model of its arithmetic (activations int16 per block of
32, integer dot products, float32 scales) and against the float32 product, on the model's shapes and odd
ones, at every row count the register blocking splits differently; a family the CPU lacks is skipped with
the flags it misses. The weights are the int8 kernels' repacked tensors, shared by both.
"""

from __future__ import annotations

from types import SimpleNamespace

import gguf
import numpy as np
import pytest
import torch
from gguf.quants import dequantize, quantize

from helpers.kernel_families import load_family_or_skip
from sglang.host import cpu_flags
from sglang.srt.layers.cpu_kernels.build import load_decode_kernels
from sglang.srt.layers.cpu_kernels.isa import FAMILIES
from sglang.srt.layers.q4_packed import pack_i8, pack_q8_i8, q4_blocks, q8_blocks

pytestmark = [pytest.mark.compiler]

SHAPES = [(960, 576), (576, 576), (3072, 576), (576, 1536), (1000, 576), (67, 64), (9, 32), (13, 96)]
ROWS = [1, 2, 3, 4, 5, 8, 9, 17, 64]


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request):
    return load_family_or_skip(request.param)


def _quantize_x(x: torch.Tensor) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """int16 per block of 32 (nearest even): q = x * (32767 / absmax), d = absmax / 32767, s = d * sum(q)."""
    xb = x.numpy().reshape(x.shape[0], -1, 32)
    amax = np.abs(xb).max(-1)
    inv = np.where(amax > 0, np.float32(32767) / np.where(amax > 0, amax, 1), 0).astype(np.float32)
    q = np.rint(xb * inv[..., None]).astype(np.int64)
    d = (amax / np.float32(32767)).astype(np.float64)
    return q, d, d * q.sum(-1)


def _expected(kind: str, raw: np.ndarray, x: torch.Tensor, n: int, k: int) -> np.ndarray:
    q, d, s = _quantize_x(x)
    if kind == "Q8_0":
        wq, ws = q8_blocks(raw, k)
        isum = np.einsum("mbi,nbi->mnb", q, wq.numpy().astype(np.int64).reshape(n, -1, 32))
        return (isum * d[:, None, :] * ws.numpy().astype(np.float64)[None]).sum(-1)
    wq, ws, wm = q4_blocks(raw, kind, k)
    isum = np.einsum("mbi,nbi->mnb", q, wq.numpy().astype(np.int64).reshape(n, -1, 32))
    return (isum * d[:, None, :] * ws.numpy()[None] + wm.numpy()[None] * s[:, None, :]).sum(-1)


@pytest.mark.parametrize("kind", ["Q4_0", "Q4_1", "Q8_0"])
@pytest.mark.parametrize("n,k", SHAPES)
def test_the_int16_kernels_compute_int16_activations_against_the_gguf_blocks(family, kind, n, k):
    t = getattr(gguf.GGMLQuantizationType, kind)
    rng = np.random.default_rng(n * k + 1)
    raw = quantize((0.1 * rng.standard_normal((n, k))).astype(np.float32), t)
    dense = torch.from_numpy(dequantize(raw, t).copy()).double()
    packed = pack_q8_i8(*q8_blocks(raw, k)) if kind == "Q8_0" else pack_i8(*q4_blocks(raw, kind, k))
    op = family.q8_linear_i16 if kind == "Q8_0" else family.q4_linear_i16
    for rows in ROWS:
        x = torch.randn(rows, k, generator=torch.Generator().manual_seed(rows + 7))
        x[0, k - 32 :] = 0  # an all-zero block (scale 0)
        x[-1, :32] *= 100  # an outlier block beside ordinary ones
        y = op(x, *packed, n)
        assert y.shape == (rows, n) and y.dtype == torch.float32
        want = _expected(kind, raw, x, n, k)
        # the integer sums are exact; only float32 rounding of the per-block scaling remains
        assert np.abs(y.double().numpy() - want).max() <= 1e-5 * np.abs(want).max() + 1e-6, (rows, n, k)
        ref = x.double() @ dense.t()
        # int16 activations: float32's answers within a few parts in 1e5 (int8's are 0.5% off)
        assert (y.double() - ref).norm().item() <= 1e-4 * ref.norm().item() + 1e-9, (rows, n, k)


def test_every_family_the_cpu_has_gives_the_same_bits():
    have = [f for f in sorted(FAMILIES) if FAMILIES[f].features <= cpu_flags()]
    if len(have) < 2:
        pytest.skip(f"this CPU runs only {have}: nothing to compare")
    n, k = 200, 576
    raw = quantize((0.1 * np.random.default_rng(1).standard_normal((n, k))).astype(np.float32), gguf.GGMLQuantizationType.Q4_1)
    packed = pack_i8(*q4_blocks(raw, "Q4_1", k))
    x = torch.randn(13, k)
    outs = [load_decode_kernels(f).q4_linear_i16(x, *packed, n) for f in have]
    assert all(torch.equal(outs[0], o) for o in outs[1:])


def test_the_int16_kernels_check_their_input(family):
    raw = quantize(np.ones((16, 64), np.float32), gguf.GGMLQuantizationType.Q4_0)
    packed = pack_i8(*q4_blocks(raw, "Q4_0", 64))
    with pytest.raises(RuntimeError, match="the int16 kernels take at least one row"):
        family.q4_linear_i16(torch.randn(0, 64), *packed, 16)
    with pytest.raises(RuntimeError, match=r"against a repacked weight \[2, 384\] for K = 96, got \[2, 256\]"):
        family.q4_linear_i16(torch.randn(2, 96), *packed, 16)
    with pytest.raises(RuntimeError, match="a repacked Q8_0 weight is int8"):
        family.q8_linear_i16(torch.randn(2, 64), *packed, 16)


def test_mixed16_puts_o_and_gate_up_on_int8_and_the_rest_on_int16(monkeypatch):
    from helpers.tiny_llama import apply_weight_format, q4_checkpoint, q8_embedding, tiny_llama

    monkeypatch.setenv("SGLANG_CPU_GGUF_MATH", "mixed16")
    model = tiny_llama(torch.float32, 4, 2, False, seed=3, tied=True)
    fmt = apply_weight_format(model, q4_checkpoint(model, 3), q8_embedding(model, 3), "gguf_q4")
    want = {"self_attn.qkv_proj": "q4_i16", "self_attn.o_proj": "q4_i8", "mlp.gate_up_proj": "q4_i8", "mlp.down_proj": "q4_i16"}
    assert {n.split(".", 2)[2]: k for n, k in fmt.layers.items() if n.startswith("layers.0.")} == want
    assert fmt.layers["lm_head"] == "q8_i16" and fmt.summary() == "6 x q4_i16; 6 x q4_i8; 1 x q8_i16"
    assert model.layers[0].mlp.down_proj.weight.is_meta  # no dense copy kept


def test_int8_and_int16_tiers_of_one_layer_share_its_repacked_blocks(monkeypatch):
    from helpers.tiny_llama import apply_weight_format, q4_checkpoint, q8_embedding, tiny_llama
    from sglang.host import cpu_model_name
    from sglang.srt.layers import linear_kernels as lk
    from sglang.srt.layers.cpu_kernels import isa

    # int8 at one row (its figures pass the bar here by fiat), mixed16 above: down is int8 then int16
    monkeypatch.delenv("SGLANG_CPU_GGUF_MATH", raising=False)
    monkeypatch.setattr(isa, "AGREEMENT", {m: (99.0,) * len(isa.BUCKETS) for m in isa.MATHS})
    monkeypatch.setitem(isa.MEASURED, load_decode_kernels().FAMILY, (isa.Measured(cpu_model_name(), "test", {
        "int8": (1.0, 3.0, 3.0, 3.0), "mixed16": (2.0, 1.0, 1.0, 1.0)}),))
    model = tiny_llama(torch.float32, 4, 2, False, seed=5, tied=True)
    fmt = apply_weight_format(model, q4_checkpoint(model, 5), q8_embedding(model, 5), "gguf_q4")
    down = model.layers[0].mlp.down_proj.kernel
    assert [lk.kernel_for_batch(down, n) for n in (1, 2, 500)] == ["q4_i8", "q4_i16", "q4_i16"]
    assert down.tiers[0].weight is down.rest.weight and down.nbytes() == down.rest.nbytes()  # one repacked copy
    assert fmt.layers["lm_head"] == "q8_i8 (<= 1 rows), q8_i16 (more rows)"


@pytest.mark.parametrize("batch", [1, 5, 37])
def test_the_decode_plan_on_mixed16_keeps_the_eager_steps_logits(monkeypatch, batch):
    from helpers.tiny_llama import apply_weight_format, q4_checkpoint, q8_embedding, tiny_llama
    from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

    monkeypatch.setenv("SGLANG_CPU_GGUF_MATH", "mixed16")
    model = tiny_llama(torch.float32, 6, 2, False, seed=batch, tied=True)
    dense = tiny_llama(torch.float32, 6, 2, False, seed=batch, tied=True)
    blocks, q8 = q4_checkpoint(model, batch), q8_embedding(model, batch)
    q4_checkpoint(dense, batch), q8_embedding(dense, batch)  # the same dequantized weights, held dense
    pool = MHATokenToKVPool(4096, 16, torch.float32, 2, 32, 3, "cpu")
    gen = torch.Generator().manual_seed(batch)
    for buf in (*pool.k_buffer, *pool.v_buffer):
        buf.copy_(torch.randn(buf.shape, generator=gen))
    lens = torch.randint(2, 60, (batch,), generator=gen)
    slots = torch.arange(batch * 64).view(batch, 64) + 16
    fb = ForwardBatch(ForwardMode.DECODE, torch.randint(0, 300, (batch,), generator=gen), lens - 1, slots[torch.arange(batch), lens - 1],
                      (lens - 1).tolist(), [1] * batch, torch.arange(batch), kv_index=slots, kv_lens=lens)
    attn = TorchNativeAttnBackend(SimpleNamespace(kv_pool=pool))
    with torch.inference_mode():
        attn.init_forward_metadata(fb)
        exact = dense.forward(fb.input_ids, fb.positions, fb, attn)
        apply_weight_format(model, blocks, q8, "gguf_q4")
        eager = model.forward(fb.input_ids, fb.positions, fb, attn)
        fused = model.forward_decode_plan(model.build_decode_plan(load_decode_kernels(), pool), fb)
    # the same kernels on the same rows; the norms sum in another order, which moves int16 roundings (a few
    # parts in 1e5 of a row) and, through them, now and then an int8 one downstream (up to about 1% of a row)
    rel = [((f - e).norm() / e.norm()).item() for f, e in zip(fused, eager)]
    assert max(rel) < 0.02 and sorted(rel)[len(rel) // 2] < 3e-4, rel
    assert (fused - exact).norm() / exact.norm() < 0.03  # the int8 layers' error; the int16 ones add ~1e-5
