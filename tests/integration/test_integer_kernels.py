"""The integer GGUF kernels of every kernel family this CPU has (needs g++): int8 activations (q4_linear_i8,
q8_linear_i8) and int16 ones (q4_linear_i16, q8_linear_i16) on the same repacked weights, and the arithmetics
built on them (``mixed``, ``mixed16``, ``int8``).

Each family's library is built and checked against an exact model of its arithmetic (activations quantized per
block of 32, integer dot products, float32 scales) and against the float32 product, on the model's shapes and
odd ones, at every row count the register blocking splits differently; a family the CPU lacks is skipped with
the flags it misses.
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
from sglang.srt.layers.onednn_linear import packs
from sglang.srt.layers.q4_packed import pack_i8, pack_q8_i8, q4_blocks, q8_blocks

pytestmark = [pytest.mark.compiler]

# the model's shapes (qkv, o, gate_up, down; a slice of the LM head) and odd ones: N not a multiple of 8 or
# 16, K of one block
SHAPES = [(960, 576), (576, 576), (3072, 576), (576, 1536), (1000, 576), (67, 64), (9, 32), (13, 96)]
ROWS = [1, 2, 3, 4, 5, 7, 8, 9, 13, 17, 64]


# activation -> (the largest quantized value, the op's suffix, the relative error against the float32 product)
ACTS = {"int8": (127, "i8", 0.02), "int16": (32767, "i16", 1e-4)}


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request):
    return load_family_or_skip(request.param)


def _quantize_x(x: torch.Tensor, top: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each row per block of 32 (nearest even): q = x * (top / absmax), d = absmax / top, s = d * sum(q) (top 127:
    llama.cpp's Q8_1)."""
    xb = x.numpy().reshape(x.shape[0], -1, 32)
    amax = np.abs(xb).max(-1)
    inv = np.where(amax > 0, np.float32(top) / np.where(amax > 0, amax, 1), 0).astype(np.float32)
    q = np.rint(xb * inv[..., None]).astype(np.int64)  # the kernel's x * (top / amax), rounded half to even
    d = (amax / np.float32(top)).astype(np.float64)
    return q, d, d * q.sum(-1)


def _expected(kind: str, raw: np.ndarray, x: torch.Tensor, n: int, k: int, top: int) -> np.ndarray:
    """The kernels' arithmetic in float64: per block, weight scale x activation scale x the integer dot product,
    plus the Q4 min x the activation block sum."""
    q, d, s = _quantize_x(x, top)
    if kind == "Q8_0":
        wq, ws = q8_blocks(raw, k)
        wi = wq.numpy().astype(np.int64).reshape(n, -1, 32)
        isum = np.einsum("mbi,nbi->mnb", q, wi)
        return (isum * d[:, None, :] * ws.numpy().astype(np.float64)[None]).sum(-1)
    wq, ws, wm = q4_blocks(raw, kind, k)
    wi = wq.numpy().astype(np.int64).reshape(n, -1, 32)
    isum = np.einsum("mbi,nbi->mnb", q, wi)
    return (isum * d[:, None, :] * ws.numpy()[None] + wm.numpy()[None] * s[:, None, :]).sum(-1)


@pytest.mark.parametrize("act", sorted(ACTS))
@pytest.mark.parametrize("kind", ["Q4_0", "Q4_1", "Q8_0"])
@pytest.mark.parametrize("n,k", SHAPES)
def test_the_integer_kernels_compute_quantized_activations_against_the_gguf_blocks(family, act, kind, n, k):
    top, suffix, tol = ACTS[act]
    t = getattr(gguf.GGMLQuantizationType, kind)
    rng = np.random.default_rng(n * k)
    raw = quantize((0.1 * rng.standard_normal((n, k))).astype(np.float32), t)
    dense = torch.from_numpy(dequantize(raw, t).copy()).double()
    packed = pack_q8_i8(*q8_blocks(raw, k)) if kind == "Q8_0" else pack_i8(*q4_blocks(raw, kind, k))
    op = getattr(family, f"q8_linear_{suffix}" if kind == "Q8_0" else f"q4_linear_{suffix}")
    for rows in ROWS:
        x = torch.randn(rows, k, generator=torch.Generator().manual_seed(rows))
        x[0, k - 32 :] = 0  # an all-zero block (scale 0)
        x[-1, :32] *= 100  # an outlier block beside ordinary ones
        y = op(x, *packed, n)
        assert y.shape == (rows, n) and y.dtype == torch.float32
        want = _expected(kind, raw, x, n, k, top)
        # the integer sums are exact; only float32 rounding of the per-block scaling remains
        assert np.abs(y.double().numpy() - want).max() <= 1e-5 * np.abs(want).max() + 1e-6, (rows, n, k)
        ref = x[1:].double() @ dense.t()  # without the row whose last block is zero (one row: nothing left)
        # int8 activations: about 0.5% per product; int16: a few parts in 1e5
        assert (y[1:].double() - ref).norm().item() <= tol * ref.norm().item() + 1e-9, (rows, n, k)


@pytest.mark.parametrize("act", sorted(ACTS))
@pytest.mark.parametrize("kind", ["Q4_0", "Q4_1", "Q8_0"])
def test_every_family_the_cpu_has_gives_the_same_bits(act, kind):
    # integer dot products are exact and the float32 epilogue is the same code (the amx family's tiles scale their
    # sums in the vector kernels' order): the families agree bit for bit at every row count, on an odd number of
    # 8-row groups (the tiles take them in pairs) and on a partial last group
    have = [f for f in sorted(FAMILIES) if FAMILIES[f].features <= cpu_flags()]
    if len(have) < 2:
        pytest.skip(f"this CPU runs only {have}: nothing to compare")
    t = getattr(gguf.GGMLQuantizationType, kind)
    libs = [load_decode_kernels(f) for f in have]
    for n, k in [(200, 576), (3072, 576), (576, 1536), (67, 64)]:
        raw = quantize((0.1 * np.random.default_rng(n).standard_normal((n, k))).astype(np.float32), t)
        packed = pack_q8_i8(*q8_blocks(raw, k)) if kind == "Q8_0" else pack_i8(*q4_blocks(raw, kind, k))
        op = f"{'q8' if kind == 'Q8_0' else 'q4'}_linear_{ACTS[act][1]}"
        for rows in (1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17, 33):
            x = torch.randn(rows, k, generator=torch.Generator().manual_seed(rows))
            x[-1, :32] *= 1000  # an outlier block: int16 values up to the top, both bytes of each in use
            outs = [getattr(lib, op)(x, *packed, n) for lib in libs]
            assert all(torch.equal(outs[0], o) for o in outs[1:]), (have, n, k, rows)


def test_the_amx_family_runs_int16_products_of_nine_rows_on_tiles():
    lib = load_family_or_skip("amx")  # skipped, with the flags it lacks, on a CPU without AMX
    assert lib.amx_tile_rows() == 9  # the process was granted the tile registers; 1-8 rows stay on vectors
    assert load_decode_kernels("avx2").amx_tile_rows() == 0


@pytest.mark.parametrize("act", sorted(ACTS))
def test_the_integer_kernels_check_their_input(family, act):
    suffix = ACTS[act][1]
    raw = quantize(np.ones((16, 64), np.float32), gguf.GGMLQuantizationType.Q4_0)
    packed = pack_i8(*q4_blocks(raw, "Q4_0", 64))
    q4, q8 = getattr(family, f"q4_linear_{suffix}"), getattr(family, f"q8_linear_{suffix}")
    with pytest.raises(RuntimeError, match=f"the {act} kernels take at least one row"):
        q4(torch.randn(0, 64), *packed, 16)
    with pytest.raises(RuntimeError, match=r"against a repacked weight \[2, 384\] for K = 96, got \[2, 256\]"):
        q4(torch.randn(2, 96), *packed, 16)
    with pytest.raises(RuntimeError, match="a repacked Q8_0 weight is int8"):
        q8(torch.randn(2, 64), *packed, 16)


@pytest.mark.parametrize("math,rest,head", [("mixed", "f32", "f32"), ("mixed16", "i16", "i8")])
def test_mixed_maths_put_o_and_gate_up_on_int8_and_the_rest_on_their_kernel(monkeypatch, math, rest, head):
    from helpers.tiny_llama import apply_weight_format, q4_checkpoint, q8_embedding, tiny_llama

    monkeypatch.setenv("SGLANG_CPU_GGUF_MATH", math)
    model = tiny_llama(torch.float32, 4, 2, False, seed=3, tied=True)
    fmt = apply_weight_format(model, q4_checkpoint(model, 3), q8_embedding(model, 3), "gguf_q4")
    want = {"self_attn.qkv_proj": f"q4_{rest}", "self_attn.o_proj": "q4_i8", "mlp.gate_up_proj": "q4_i8", "mlp.down_proj": f"q4_{rest}"}
    assert {n.split(".", 2)[2]: k for n, k in fmt.layers.items() if n.startswith("layers.0.")} == want
    # mixed16's head is int8 (its answers held there), mixed's float32 (they did not)
    assert fmt.layers["lm_head"] == f"q8_{head}" and fmt.summary() == f"6 x q4_{rest}; 6 x q4_i8; 1 x q8_{head}"
    assert model.layers[0].mlp.down_proj.weight.is_meta  # no dense copy kept


def test_int8_and_int16_tiers_of_one_layer_share_its_repacked_blocks(monkeypatch):
    from helpers.tiny_llama import apply_weight_format, q4_checkpoint, q8_embedding, tiny_llama
    from sglang.host import cpu_model
    from sglang.srt.layers import linear_kernels as lk
    from sglang.srt.layers.cpu_kernels import isa

    # int8 at one row (its figures pass the bar here by fiat), mixed16 above: down is int8 then int16
    monkeypatch.delenv("SGLANG_CPU_GGUF_MATH", raising=False)
    monkeypatch.setattr(isa, "AGREEMENT", {m: (99.0,) * len(isa.BUCKETS) for m in isa.MATHS})
    monkeypatch.setitem(isa.MEASURED, load_decode_kernels().FAMILY, (isa.Measured(cpu_model(), "test", {
        "int8": (1.0, 3.0, 3.0, 3.0), "mixed16": (2.0, 1.0, 1.0, 1.0)}),))
    model = tiny_llama(torch.float32, 4, 2, False, seed=5, tied=True)
    fmt = apply_weight_format(model, q4_checkpoint(model, 5), q8_embedding(model, 5), "gguf_q4")
    down = model.layers[0].mlp.down_proj.kernel
    assert [lk.kernel_for_batch(down, n) for n in (1, 2, 500)] == ["q4_i8", "q4_i16", "q4_i16"]
    assert down.tiers[0].weight is down.rest.weight and down.nbytes() == down.rest.nbytes()  # one repacked copy
    # its bytes are its own (the repacked blocks share an arena on huge pages): 8-row groups, 20 bytes a block of 32
    n, k = down.out_features, down.in_features
    assert down.nbytes() == -(-n // 8) * 8 * (k // 32) * 20
    assert fmt.layers["lm_head"] == "q8_i8"  # int8 under both


@pytest.mark.parametrize("math,layer,head", [("int8", "q4_i8", "q8_i8"), ("float32", "q4_f32", "q8_f32")])
def test_the_weight_format_pass_gives_the_forced_arithmetic_at_every_batch_size(monkeypatch, math, layer, head):
    from helpers.tiny_llama import apply_weight_format, q4_checkpoint, q8_embedding, tiny_llama
    from sglang.srt.layers import linear_kernels as lk

    monkeypatch.setenv("SGLANG_CPU_GGUF_MATH", math)
    model = tiny_llama(torch.float32, 4, 2, False, seed=1, tied=True)
    fmt = apply_weight_format(model, q4_checkpoint(model, 1), q8_embedding(model, 1), "gguf_q4")
    assert set(fmt.layers.values()) == {layer, head} and fmt.layers["lm_head"] == head
    gu = model.layers[0].mlp.gate_up_proj
    assert [lk.kernel_for_batch(gu.kernel, n) for n in (1, 2, 8, 64, 300)] == [layer] * 5 and gu.weight.is_meta


def test_the_default_arithmetic_is_the_measured_plan_for_this_cpu_at_each_batch_size(caplog, monkeypatch):
    import logging

    from helpers.tiny_llama import apply_weight_format, q4_checkpoint, q8_embedding, tiny_llama
    from sglang.srt.layers import linear_kernels as lk
    from sglang.srt.layers.cpu_kernels.isa import host_gguf_math

    monkeypatch.delenv("SGLANG_CPU_GGUF_MATH")  # tests/conftest.py pins float32; this is the default's test
    model = tiny_llama(torch.float32, 4, 2, False, seed=2, tied=True)
    with caplog.at_level(logging.INFO, logger="sglang.srt.model_executor.model_runner"):
        apply_weight_format(model, q4_checkpoint(model, 2), q8_embedding(model, 2), "gguf_q4")
    plan = host_gguf_math(load_decode_kernels().FAMILY)
    assert f"GGUF kernels: {plan.format()}" in caplog.text
    layer = model.layers[0]
    for rows in (1, 2, 8, 9, 32, 33, 64, 65, 300):
        math = plan.for_batch(rows)
        if math == "bf16":  # the amx family above its integer buckets: every product on oneDNN's bfloat16 GEMM
            kernels = [layer.mlp.gate_up_proj, layer.mlp.down_proj, layer.self_attn.qkv_proj, layer.self_attn.o_proj, model.lm_head]
            assert {lk.kernel_for_batch(m.kernel, rows) for m in kernels} == {"onednn_bf16"}
            continue
        gate_up = {"float32": "f32", "int16": "i16"}.get(math, "i8")  # o alike
        assert lk.kernel_for_batch(layer.mlp.gate_up_proj.kernel, rows) == f"q4_{gate_up}"
        down = {"float32": "f32", "int16": "i16", "mixed": "f32", "mixed16": "i16", "int8": "i8"}[math]  # qkv, down and the head alike
        assert lk.kernel_for_batch(layer.mlp.down_proj.kernel, rows) == f"q4_{down}"
        assert lk.kernel_for_batch(layer.self_attn.qkv_proj.kernel, rows) == f"q4_{down}"
        head = "i8" if math == "mixed16" else down
        assert lk.kernel_for_batch(model.lm_head.kernel, rows) == f"q8_{head}"


def _plan_on_this_cpu(monkeypatch, by_bucket_ms: dict[str, tuple[float, float, float, float]]) -> None:
    """The shipped table replaced by one measured "on this CPU", with mixed passing the quality bar at every batch
    size (the rule then picks from these figures)."""
    from sglang.host import cpu_model
    from sglang.srt.layers.cpu_kernels import isa

    monkeypatch.delenv("SGLANG_CPU_GGUF_MATH", raising=False)
    monkeypatch.setattr(isa, "AGREEMENT", {**isa.AGREEMENT, "mixed": (99.4,) * len(isa.BUCKETS)})
    monkeypatch.setattr(isa, "HELD", {})
    monkeypatch.setitem(isa.MEASURED, load_decode_kernels().FAMILY, (isa.Measured(cpu_model(), "test", by_bucket_ms),))


def test_a_plan_that_changes_arithmetic_by_batch_size_keeps_both_kernels_on_the_same_blocks(monkeypatch):
    from helpers.tiny_llama import apply_weight_format, q4_checkpoint, q8_embedding, tiny_llama
    from sglang.srt.layers import linear_kernels as lk

    # float32 at 1 row and above 32, mixed at 2-32
    _plan_on_this_cpu(monkeypatch, {"float32": (1.0, 2.0, 2.0, 2.0), "mixed": (1.5, 1.0, 1.0, 3.0)})
    model = tiny_llama(torch.float32, 4, 2, False, seed=4, tied=True)
    fmt = apply_weight_format(model, q4_checkpoint(model, 4), q8_embedding(model, 4), "gguf_q4")
    gu, o, qkv = model.layers[0].mlp.gate_up_proj.kernel, model.layers[0].self_attn.o_proj.kernel, model.layers[0].self_attn.qkv_proj.kernel
    want = {1: "q4_f32", 2: "q4_i8", 32: "q4_i8", 33: "q4_f32", 500: "q4_f32"}
    assert {n: lk.kernel_for_batch(gu, n) for n in want} == want and {n: lk.kernel_for_batch(o, n) for n in want} == want
    assert isinstance(gu, lk.BySize) and gu.tiers[0].weight is gu.rest.weight  # one float32 copy, two bounds
    assert gu.nbytes() == gu.tiers[0].nbytes() + gu.tiers[1].nbytes()
    assert qkv.kind == "q4_f32" and fmt.layers["lm_head"] == "q8_f32"
    assert fmt.layers["layers.0.mlp.gate_up_proj"] == "q4_f32 (<= 1 rows), q4_i8 (<= 32 rows), q4_f32 (more rows)"


@pytest.mark.parametrize("plan", ["int8", "by_size", "mixed16", "int16", "int8/avx2", "bf16"])
@pytest.mark.parametrize("batch,first_token", [(1, False), (1, True), (5, False), (37, False)])
def test_the_decode_plan_on_integer_kernels_keeps_the_eager_steps_logits(monkeypatch, batch, first_token, plan):
    from helpers.tiny_llama import apply_weight_format, q4_checkpoint, q8_embedding, tiny_llama
    from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

    # int8/avx2: the plan built from the avx2 family's library (every x86-64 CPU here has it), whatever the host's
    plan, _, plan_family = plan.partition("/")
    kernels = load_family_or_skip(plan_family) if plan_family else load_decode_kernels()
    if plan == "bf16" and not packs(torch.bfloat16):
        pytest.skip("the bf16 arithmetic: oneDNN has no bfloat16 GEMM on this CPU (it needs AVX-512 BF16 or AMX)")
    if plan in ("int8", "mixed16", "int16", "bf16"):
        monkeypatch.setenv("SGLANG_CPU_GGUF_MATH", plan)
    else:  # the fused plan picks each layer's kernel by rows as the eager layers do: mixed at 2-8 and >32, float32 else
        _plan_on_this_cpu(monkeypatch, {"float32": (1.0, 2.0, 1.0, 2.0), "mixed": (2.0, 1.0, 2.0, 1.0)})
    bias = batch == 5  # one case with a qkv bias (added by the product's own groups in the one-region step)
    model = tiny_llama(torch.float32, 6, 2, bias, seed=batch, tied=True)
    dense = tiny_llama(torch.float32, 6, 2, bias, seed=batch, tied=True)
    blocks, q8 = q4_checkpoint(model, batch), q8_embedding(model, batch)
    q4_checkpoint(dense, batch), q8_embedding(dense, batch)  # the same dequantized weights, held dense
    pool = MHATokenToKVPool(4096, 16, torch.float32, 2, 32, 3, "cpu")
    gen = torch.Generator().manual_seed(batch)
    for buf in (*pool.k_buffer, *pool.v_buffer):  # a random cached prefix
        buf.copy_(torch.randn(buf.shape, generator=gen))
    lens = torch.randint(2, 60, (batch,), generator=gen)
    if first_token:  # a context of one token: split-KV attention (one request) leaves a token range empty
        lens[:] = 1
    slots = torch.arange(batch * 64).view(batch, 64) + 16  # each request's own run of slots
    fb = ForwardBatch(ForwardMode.DECODE, torch.randint(0, 300, (batch,), generator=gen), lens - 1, slots[torch.arange(batch), lens - 1],
                      (lens - 1).tolist(), [1] * batch, torch.arange(batch), kv_index=slots, kv_lens=lens)
    attn = TorchNativeAttnBackend(SimpleNamespace(kv_pool=pool))
    with torch.inference_mode():
        attn.init_forward_metadata(fb)
        exact = dense.forward(fb.input_ids, fb.positions, fb, attn)
        apply_weight_format(model, blocks, q8, "gguf_q4")
        eager = model.forward(fb.input_ids, fb.positions, fb, attn)
        decode_plan = model.build_decode_plan(kernels, pool)
        fused = model.forward_decode_plan(decode_plan, fb)
    # all-integer products run the step in one parallel region (team_step.h); by_size keeps float32 layers, bf16
    # oneDNN's products
    assert decode_plan.runs_in_one_region(batch) == (plan not in ("by_size", "bf16"))
    # an all-bf16 step runs bf16_step.h's driver: its products' inputs written and outputs read in bfloat16
    assert decode_plan.driver(batch) == {"by_size": "per_op", "bf16": "bf16"}.get(plan, "one_region")
    # and with an integer LM head (int8, and mixed16's int8 head) the final norm and the head run in it too
    head = model.lm_head.kernel.kind
    assert decode_plan.fuses_head(batch, batch) == (plan not in ("by_size", "bf16") and head in ("q8_i8", "q8_i16")), head
    assert fused.shape == eager.shape == (batch, model.lm_head.embedding.vocab_size)
    # the fused head indexes the residual stream with `rows`: a row outside the batch, or a plan that does not
    # fuse, is an error before the step runs, never a read out of bounds
    h = torch.zeros(batch, model.norm.weight.numel())
    cos, sin = model.rotary.cos[fb.positions], model.rotary.sin[fb.positions]
    step = (h, cos, sin, fb.kv_index, fb.kv_lens, fb.out_cache_loc)
    with pytest.raises(RuntimeError, match="outside the batch" if decode_plan.fuses_head(batch, 1) else "does not fuse"):
        decode_plan.run_logits(*step, torch.tensor([batch]))
    with pytest.raises(RuntimeError, match="1 <= rows"):
        decode_plan.run_logits(*step, torch.arange(batch + 1) % batch)
    # an extend chunk asks for more logits rows than it has tokens (its prompt logprobs beside its sampling row):
    # that step keeps the separate head instead of failing
    assert not decode_plan.fuses_head(batch, batch + 1)
    fb.logits_indices = torch.cat([fb.logits_indices, fb.logits_indices[:1]])
    with torch.inference_mode():
        more = model.forward_decode_plan(decode_plan, fb)  # the same step again: it rewrites the same K/V
    assert more.shape == (batch + 1, model.lm_head.embedding.vocab_size)
    assert torch.allclose(more[-1], more[0], rtol=1e-5, atol=1e-5)
    # the same kernels on the same rows; the norms sum in another order, which now and then moves an activation
    # across an int8 rounding boundary (a row then differs by the int8 error itself, about 1%); under mixed16 it
    # moves int16 roundings too (a few parts in 1e5 of a row), and through them int8 ones downstream more often
    rel = [((f - e).norm() / e.norm()).item() for f, e in zip(fused, eager)]
    if plan in ("mixed16", "int16"):
        assert max(rel) < 0.02 and sorted(rel)[len(rel) // 2] < 3e-4, rel
    elif plan == "bf16":  # an activation a float32 rounding apart may round to the neighbouring bfloat16 (2^-8 of it)
        assert max(rel) < 0.01 and sorted(rel)[len(rel) // 2] < 2e-3, rel
    else:
        assert sum(r < 1e-5 for r in rel) >= 0.9 * batch, rel
    assert all(((f - x).norm() / x.norm()).item() < 0.05 for f, x in zip(fused, exact))
    assert (fused - exact).norm() / exact.norm() < 0.03  # int8 activations against the exact weights


@pytest.mark.parametrize("rows,threads", [((6,), 0), ((6,), 16), ((5, 3), 0), ((21,), 0)],
                         ids=["one-request", "one-request-16-threads", "two-requests", "a-prefill"])
def test_the_one_region_step_reads_a_requests_kv_once_for_all_its_rows(monkeypatch, rows, threads):
    # a verify's or a short prefill's rows of one request attend to the same slots (each to one more than the row before):
    # the step reads those K/V rows once for all of them (decode_attention.h's units; one request alone: split over its
    # tokens and merged; 21 rows: units of 16 and 5), and every row keeps the eager step's logits. On 16 threads one
    # request's 46 tokens split into 16 ranges, and its first rows (41-45 tokens) have none in the last ones.
    from helpers.tiny_llama import gguf_model_and_pool
    from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
    from sglang.srt.model_executor.fused_decode import FusedDecode

    monkeypatch.setenv("SGLANG_CPU_GGUF_MATH", "mixed16")
    model, pool = gguf_model_and_pool(11)  # every slot a random cached K/V
    gen = torch.Generator().manual_seed(11)
    prefixes = [40 + 9 * i for i in range(len(rows))]
    slots = [torch.arange(p + n) + 16 + 256 * i for i, (p, n) in enumerate(zip(prefixes, rows))]  # each request's own run
    fb = ForwardBatch(ForwardMode.EXTEND, torch.randint(0, 300, (sum(rows),), generator=gen),
                      torch.cat([torch.arange(p, p + n) for p, n in zip(prefixes, rows)]), torch.cat([s[p:] for s, p in zip(slots, prefixes)]),
                      prefixes, list(rows), torch.arange(sum(rows)), kv_slots=slots)
    attn = TorchNativeAttnBackend(SimpleNamespace(kv_pool=pool))
    kernels = load_decode_kernels()
    saved_threads = torch.get_num_threads()
    try:
        torch.set_num_threads(threads or saved_threads)
        with torch.inference_mode():
            attn.init_forward_metadata(fb)
            eager = model.forward(fb.input_ids, fb.positions, fb, attn)
            plan = FusedDecode(model, model.build_decode_plan(kernels, pool), extend=True)
            assert plan.plan.runs_in_one_region(sum(rows))
            fused = plan.run_extend(fb)  # rewrites the new rows' K/V before any row attends
    finally:
        torch.set_num_threads(saved_threads)
    assert fused.shape == eager.shape == (sum(rows), model.lm_head.embedding.vocab_size)
    rel = [((f - e).norm() / e.norm()).item() for f, e in zip(fused, eager)]
    # mixed16's bound of the decode test above: an extend row moves more int8 roundings than a decode row (its
    # products' inputs differ from the eager extend's by float32 rounding), so only the largest error is bounded here
    assert max(rel) < 0.02, rel


def test_argmax_rows_is_torch_max_indices_on_ties_nans_infinities_and_row_strides(family):
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(7, 1003, generator=gen)
    x[1, 5] = x[1, 900] = 50.0  # a tie: the first wins
    x[2, 17] = x[2, 600] = float("nan")  # a NaN is the maximum, the first one
    x[3] = float("-inf")  # all -inf: index 0
    x[4, 1002] = float("inf")  # the last entry
    x[5, :] = 0.0
    wide = torch.randn(7, 1100, generator=gen)
    wide[:, :1003] = x
    for logits in (x, wide[:, :1003], x[:1], x[6:]):  # a row stride larger than the row (the head's vocab slice)
        assert family.argmax_rows(logits).tolist() == logits.max(-1).indices.tolist()
    with pytest.raises(RuntimeError, match="unit stride"):
        family.argmax_rows(x.t())
    with pytest.raises(RuntimeError, match="float32"):
        family.argmax_rows(x.double())


def test_argmax_rows_with_a_sparse_bias_is_the_biased_rows_max_and_leaves_the_logits_as_they_were(family):
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(5, 1003, generator=gen)
    x[0, 7], x[0, 8] = 40.0, 30.0  # the raw maximum, pushed below the runner-up by its bias
    x[1, 300] = x[1, 900] = 9.0  # a tie made by the bias: the first index wins
    x[2, 11] = float("nan")  # a NaN stays the maximum whatever the bias
    x[3, 20] = float("inf")  # +inf plus a negative bias is still +inf
    bias = [{7: -100.0, 8: 0.5}, {300: 1.0, 900: 1.0, 901: -3.0}, {11: -50.0, 12: 100.0}, {20: -100.0}, {}]
    ids = torch.tensor([t for b in bias for t in b], dtype=torch.long)
    values = torch.tensor([v for b in bias for v in b.values()], dtype=torch.float32)
    offsets = torch.tensor([0, *np.cumsum([len(b) for b in bias]).tolist()], dtype=torch.long)
    wide = torch.randn(5, 1100, generator=gen)
    wide[:, :1003] = x
    for logits in (x, wide[:, :1003]):  # a row stride larger than the row
        before = logits.clone()
        expected = logits.clone()
        for r, b in enumerate(bias):
            if b:
                expected[r, torch.tensor(list(b))] += torch.tensor(list(b.values()))
        got = family.argmax_rows(logits, ids, values, offsets).tolist()
        assert got == expected.max(-1).indices.tolist()
        assert got[:2] == [8, 300]
        assert torch.equal(torch.isnan(logits), torch.isnan(before)) and torch.equal(logits.nan_to_num(), before.nan_to_num())
    with pytest.raises(RuntimeError, match="outside"):
        family.argmax_rows(x, torch.tensor([1003]), torch.tensor([1.0]), torch.tensor([0, 1, 1, 1, 1, 1]))
    with pytest.raises(RuntimeError, match="offsets"):
        family.argmax_rows(x, ids, values, offsets[:-1])
    with pytest.raises(RuntimeError, match="come together"):
        family.argmax_rows(x, ids, values)
    with pytest.raises(RuntimeError, match="overlap"):
        family.argmax_rows(x[:1].expand(3, 1003), torch.tensor([5]), torch.tensor([1.0]), torch.tensor([0, 1, 1, 1]))
    assert torch.equal(x.nan_to_num(), x.clone().nan_to_num())


def test_sampling_greedy_rows_with_only_a_logit_bias_takes_the_kernels_path_and_the_copys_tokens(family):
    from sglang.srt.layers.sampler import RequestSampler, sample
    from sglang.srt.sampling.sampling_params import SamplingParams

    gen = torch.Generator().manual_seed(6)
    logits = torch.randn(4, 777, generator=gen)
    top = logits.max(-1).indices.tolist()
    biases = [{top[0]: -100.0}, {}, {top[2]: -100.0, 3: 100.0}, {top[3]: -0.0}]

    def samplers() -> list[RequestSampler]:
        out = []
        for i, b in enumerate(biases):
            p = SamplingParams.from_dict({"temperature": 0, "logit_bias": {str(k): v for k, v in b.items()}}, 777)
            out.append(RequestSampler(p, 0, i))
        return out

    before = logits.clone()
    fast_samplers, copy_samplers = samplers(), samplers()
    fast, fast_info = sample(logits, fast_samplers, family.argmax_rows)
    copied, copy_info = sample(logits, copy_samplers, None)  # no kernel: the float32 copy, penalized
    assert fast == copied and fast_info == copy_info == [None] * 4
    assert fast[0] != top[0] and fast[1] == top[1] and fast[2] == 3 and fast[3] == top[3]
    assert torch.equal(logits, before)  # the kernel restored the rows it biased
    assert [s.counts for s in fast_samplers] == [s.counts for s in copy_samplers] == [{t: 1} for t in fast]


def test_decode_inputs_are_the_embeddings_q8_rows_and_the_rotary_rows_bit_for_bit(family):
    from sglang.srt.layers.q4_packed import q8_rows

    gen = torch.Generator().manual_seed(5)
    vocab, hidden, n_pos, head = 50, 96, 40, 64
    q = torch.randint(-128, 128, (vocab, hidden), dtype=torch.int8, generator=gen)
    scale = torch.rand(vocab, hidden // 32, generator=gen) * 0.02
    ids, pos = torch.tensor([0, 49, 7, 7]), torch.tensor([3, 0, 39, 3])
    for dtype in (torch.float32, torch.bfloat16):  # the rotary tables are the model's dtype
        cos, sin = torch.randn(n_pos, head, generator=gen).to(dtype), torch.randn(n_pos, head, generator=gen).to(dtype)
        h, c, s = family.decode_inputs(q, scale, ids, cos, sin, pos)
        assert h.dtype == torch.float32 and torch.equal(h, q8_rows(q, scale, ids, torch.float32))
        assert c.dtype == dtype and torch.equal(c, cos[pos]) and torch.equal(s, sin[pos])
    with pytest.raises(RuntimeError, match="token id 50 of row 1 is outside the vocabulary"):
        family.decode_inputs(q, scale, torch.tensor([1, 50]), cos, sin, torch.tensor([0, 1]))
    with pytest.raises(RuntimeError, match="position -1 of row 0 is outside the rotary table"):
        family.decode_inputs(q, scale, torch.tensor([1]), cos, sin, torch.tensor([-1]))
    with pytest.raises(RuntimeError, match="contiguous int8"):
        family.decode_inputs(q.t(), scale, ids, cos, sin, pos)
    with pytest.raises(RuntimeError, match="same length"):
        family.decode_inputs(q, scale, ids, cos, sin, pos[:2])
    with pytest.raises(RuntimeError, match="got Int"):
        family.decode_inputs(q, scale, ids.int(), cos, sin, pos)
