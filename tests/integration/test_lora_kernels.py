"""The fused decode plan's segmented LoRA product (csrc/lora_product.h) of every kernel family this CPU has
(needs g++): against a torch reference on odd ranks, sizes and row counts, and the whole plan with adapter
rows against the eager model with the torch_native backend, on a tiny random Llama."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from helpers.kernel_families import load_family_or_skip
from helpers.lora_adapters import PEFT, write_adapter
from helpers.tiny_llama import tiny_llama
from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
from sglang.srt.layers.cpu_kernels.build import load_decode_kernels
from sglang.srt.layers.cpu_kernels.isa import FAMILIES
from sglang.srt.lora.lora_registry import LoRARef
from sglang.srt.lora.manager import LoRAManager
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.model_executor.fused_decode import attach_lora

pytestmark = [pytest.mark.compiler]


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request):
    return load_family_or_skip(request.param)


def pool_weights(slots: int, rank: int, ranks: list[int], n_in: int, parts: list[int], gen: torch.Generator,
                 dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """``A [slots, P R, in]`` and ``Bt [slots, P R, out]`` laid out as the slot pool lays them out: slot s's
    adapter (rank ``ranks[s]`` <= R) fills rows ``[p R, p R + r)`` of part p, and its Bt rows only the
    columns of part p's outputs; zeros elsewhere."""
    P, out = len(parts), sum(parts)
    a, bt = torch.zeros(slots, P * rank, n_in), torch.zeros(slots, P * rank, out)
    for s, r in enumerate(ranks):
        col = 0
        for p, size in enumerate(parts):
            a[s, p * rank : p * rank + r] = torch.randn(r, n_in, generator=gen) * 0.3
            bt[s, p * rank : p * rank + r, col : col + size] = torch.randn(r, size, generator=gen) * 0.3
            col += size
    return a.to(dtype), bt.to(dtype)


def reference(x, y, a, bt, row_slots, active):
    """Each row alone, as the torch_native backend rounds: A x in the model dtype, then y + t Bt once."""
    want = y.clone()
    for r, s in enumerate(row_slots.tolist()):
        if s >= 0 and active[s]:
            t = (x[r].float() @ a[s].float().t()).to(x.dtype).float()
            want[r] = (y[r].float() + t @ bt[s].float()).to(y.dtype)
    return want


CASES = [  # rows, R, per-slot ranks, in, part sizes
    (1, 8, [8, 3], 576, [576, 192, 192]),  # the model's qkv, one row
    (16, 8, [8, 8, 8, 8, 8], 576, [1536, 1536]),  # gate_up, four adapters and the base mixed
    (7, 5, [3, 5, 1], 40, [24, 8, 8]),  # odd rank, an input that is not a multiple of 8, odd parts
    (17, 3, [3, 2], 1536, [576]),  # down
    (3, 1, [1], 13, [9]),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"rows{c[0]}-R{c[1]}-in{c[3]}-parts{len(c[4])}")
def test_the_segmented_product_equals_torch_row_by_row(family, case, dtype):
    rows, rank, ranks, n_in, parts = case
    gen = torch.Generator().manual_seed(rows * 31 + rank)
    slots = len(ranks) + 1  # the last slot holds nothing
    a, bt = pool_weights(slots, rank, ranks + [0], n_in, parts, gen, dtype)
    x = torch.randn(rows, n_in, generator=gen).to(dtype)
    y = torch.randn(rows, sum(parts), generator=gen).to(dtype)
    row_slots = torch.randint(-1, len(ranks), (rows,), generator=gen)
    row_slots[0] = 0  # at least one adapter row
    active = [True] * slots
    got = family.lora_product(x, y.clone(), a, bt, parts, row_slots)
    want = reference(x, y, a, bt, row_slots, active)
    base = row_slots < 0
    assert torch.equal(got[base], y[base])  # base rows: untouched bits
    if dtype == torch.float32:
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    else:  # one rounding of the same float32 sum, in another order: at most a bfloat16 step apart
        torch.testing.assert_close(got.float(), want.float(), rtol=2 ** -7, atol=1e-3)
    # each row's bits depend on that row alone: a request gets the same result alone as in any batch
    for r in range(rows):
        alone = family.lora_product(x[r : r + 1], y[r : r + 1].clone(), a, bt, parts, row_slots[r : r + 1])
        assert torch.equal(alone[0], got[r])
    # the mask: slot 0's adapter has no weights in this linear, its rows stay as they were
    mask = torch.ones(slots, 4, dtype=torch.bool)
    mask[0, 0] = False
    masked = family.lora_product(x, y.clone(), a, bt, parts, row_slots, mask)
    zero = row_slots == 0
    assert torch.equal(masked[zero], y[zero]) and torch.equal(masked[~zero], got[~zero])


def test_the_product_checks_its_input(family):
    a, bt = torch.zeros(2, 4, 16), torch.zeros(2, 4, 8)
    x, y = torch.zeros(3, 16), torch.zeros(3, 8)
    with pytest.raises(RuntimeError, match="LoRA slot 2 of row 1 is outside the pool of 2 slots"):
        family.lora_product(x, y, a, bt, [8], torch.tensor([0, 2, -1]))
    with pytest.raises(RuntimeError, match="part sizes must sum"):
        family.lora_product(x, y, a, bt, [4], torch.tensor([0, 1, -1]))
    with pytest.raises(RuntimeError, match="one entry per row"):
        family.lora_product(x, y, a, bt, [8], torch.tensor([0]))


# -- the whole plan ----------------------------------------------------------------------------------
PAGE, KV_SLOTS = 16, 2048
def write_model_adapter(path: Path, model, r: int, modules: list[str], seed: int) -> None:
    from sglang.srt.lora.mem_pool import module_dims

    write_adapter(path, module_dims(model), len(model.layers), r, modules, seed)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_the_plan_with_adapter_rows_equals_the_eager_model(tmp_path, dtype):
    kernels = load_decode_kernels()
    model = tiny_llama(dtype, 4, 2, True, seed=3)
    refs = [LoRARef.make(n, str(tmp_path / n)) for n in ("a", "b")]
    write_model_adapter(Path(refs[0].lora_path), model, 5, list(PEFT), seed=1)  # rank 5 in a pool of rank 6
    write_model_adapter(Path(refs[1].lora_path), model, 2, ["q_proj", "v_proj", "down_proj"], seed=2)
    cfg = SimpleNamespace(max_loras_per_batch=3, max_loaded_loras=None, max_lora_rank=6, lora_target_modules=set(PEFT),
                          lora_eviction_policy="lru", lora_backend="torch_native", lora_paths=refs)
    mgr = LoRAManager(model, cfg, dtype, torch.device("cpu"))
    kv = MHATokenToKVPool(KV_SLOTS, PAGE, dtype, 2, 32, 3, "cpu")
    gen = torch.Generator().manual_seed(5)
    for i in range(3):  # a cached prefix: random K/V already in the pool
        kv.k_buffer[i].copy_(torch.randn(kv.k_buffer[i].shape, generator=gen))
        kv.v_buffer[i].copy_(torch.randn(kv.v_buffer[i].shape, generator=gen))
    batch, lora_ids = 7, [refs[0].lora_id, None, refs[1].lora_id, refs[0].lora_id, None, refs[1].lora_id, refs[0].lora_id]
    lens = torch.randint(3, 60, (batch,), generator=gen)
    width = -(-int(lens.max()) // PAGE)
    pages = torch.randperm(KV_SLOTS // PAGE - 1, generator=gen)[: batch * width].view(batch, width) + 1
    slots = (pages[:, :, None] * PAGE + torch.arange(PAGE)).reshape(batch, width * PAGE)
    fb = ForwardBatch(ForwardMode.DECODE, torch.randint(0, 300, (batch,), generator=gen), lens - 1, slots[torch.arange(batch), lens - 1],
                      (lens - 1).tolist(), [1] * batch, torch.arange(batch), kv_index=slots, kv_lens=lens)
    attn = TorchNativeAttnBackend(SimpleNamespace(kv_pool=kv))
    plan = model.build_decode_plan(kernels, kv)
    assert attach_lora(plan, mgr)[0] and plan.lora_slots() == 3
    with torch.inference_mode():
        base_plan = model.forward_decode_plan(plan, fb).float()
        mgr.prepare(lora_ids, [1] * batch)
        try:
            attn.init_forward_metadata(fb)
            want = model.forward(fb.input_ids, fb.positions, fb, attn).float()
            got = model.forward_decode_plan(plan, fb, mgr.plan_rows()).float()
        finally:
            mgr.finish()
    adapter_rows = torch.tensor([i is not None for i in lora_ids])
    assert (got[adapter_rows] - base_plan[adapter_rows]).abs().max() > 0.05  # the adapters change the logits
    assert torch.equal(got[~adapter_rows], base_plan[~adapter_rows])  # base rows: the plan without adapters, bit for bit
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    torch.testing.assert_close(got, want, atol=tol * want.abs().max().item(), rtol=0)
    assert torch.equal(got.argmax(-1), want.argmax(-1))
