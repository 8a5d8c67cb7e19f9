"""Multi-LoRA building blocks without a server: the segmented product, the per-layer mapping onto the fused
modules, the slot pool (eviction, pinning, rank), the host cache bound, admission, model-name parsing and
the prefix cache's adapter namespaces. Adapters are PEFT-format files written here for a tiny random Llama."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from helpers.tiny_llama import tiny_llama
from sglang.srt.lora.backend import TorchNativeLoRABackend
from sglang.srt.lora.lora_registry import LoRARef
from sglang.srt.lora.manager import LoRAManager
from sglang.srt.lora.tokenizer_side import split_model
from sglang.srt.mem_cache.radix_cache import RadixCache

PARTS = {"q_proj": "self_attn", "k_proj": "self_attn", "v_proj": "self_attn", "o_proj": "self_attn",
         "gate_proj": "mlp", "up_proj": "mlp", "down_proj": "mlp"}


def write_adapter(path: Path, model, r: int, modules: list[str], seed: int, alpha: float = 16.0) -> dict:
    """A PEFT adapter directory for ``model``; returns ``{(layer, module): (A, B, scaling)}``."""
    from safetensors.torch import save_file

    from sglang.srt.lora.mem_pool import module_dims

    dims = module_dims(model)
    g = torch.Generator().manual_seed(seed)
    tensors, weights = {}, {}
    for i in range(len(model.layers)):
        for m in modules:
            n_in, n_out = dims[m]
            a, b = 0.1 * torch.randn(r, n_in, generator=g), 0.1 * torch.randn(n_out, r, generator=g)
            key = f"base_model.model.model.layers.{i}.{PARTS[m]}.{m}"
            tensors[key + ".lora_A.weight"], tensors[key + ".lora_B.weight"] = a, b
            weights[(i, m)] = (a, b, alpha / r)
    path.mkdir(parents=True)
    save_file(tensors, str(path / "adapter_model.safetensors"))
    (path / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": r, "lora_alpha": alpha, "target_modules": modules}))
    return weights


def lora_cfg(**kw) -> SimpleNamespace:
    base = {"max_loras_per_batch": 2, "max_loaded_loras": None, "max_lora_rank": 8, "lora_target_modules": set(PARTS),
            "lora_eviction_policy": "lru", "lora_backend": "torch_native", "lora_paths": []}
    return SimpleNamespace(**{**base, **kw})


@pytest.fixture
def model():
    return tiny_llama(torch.float32)


def test_segmented_product_equals_a_loop_over_rows():
    torch.manual_seed(0)
    slots, rank, n_in, n_out = 3, 4, 16, 24
    a, b = torch.randn(slots, rank, n_in), torch.randn(slots, n_out, rank)
    row_slots, lens = [0, -1, 2, 0, 1, 2], [2, 1, 3, 1, 2, 1]
    x, out = torch.randn(sum(lens), n_in), torch.randn(sum(lens), n_out)
    want = out.clone()
    row = 0
    for s, n in zip(row_slots, lens):
        for _ in range(n):
            if s >= 0:
                want[row] += b[s] @ (a[s] @ x[row])
            row += 1
    be = TorchNativeLoRABackend()
    info = be.prepare_batch(row_slots, lens)
    assert [s for s, _, _ in info.segments] == [0, 1, 2]  # one product pair per slot, not per request
    bt = b.transpose(1, 2).contiguous()  # the pool holds B transposed
    torch.testing.assert_close(be.run(x, out.clone(), a, bt, info, lambda s: True), want)
    skip_one = be.run(x, out.clone(), a, bt, info, lambda s: s != 1)  # slot 1's adapter has no weights in this layer
    assert torch.equal(skip_one[7:9], out[7:9])  # rows 7-8 are the slot-1 request: unchanged
    torch.testing.assert_close(torch.cat([skip_one[:7], skip_one[9:]]), torch.cat([want[:7], want[9:]]))
    assert be.prepare_batch([-1, -1], [3, 1]) is None  # a base-only batch takes no product at all
    single = be.prepare_batch([2, 2], [1, 1])
    assert single.single == 2


@pytest.mark.parametrize("modules", [list(PARTS), ["q_proj", "v_proj", "down_proj"]])
def test_every_fused_layer_adds_b_a_x_times_scale_per_part(tmp_path, model, modules):
    ref = LoRARef.make("a", str(tmp_path / "a"))
    w = write_adapter(tmp_path / "a", model, 4, modules, seed=1)
    dense = {name: lin.weight.detach().clone() for name, lin in model.named_modules() if hasattr(lin, "lora")}
    mgr = LoRAManager(model, lora_cfg(lora_paths=[ref]), torch.float32, torch.device("cpu"))
    x = torch.randn(5, 256)
    mgr.prepare([ref.lora_id, None], [3, 2])  # three adapter rows, two base rows
    try:
        for i, layer in enumerate(model.layers):
            for fused, lin, parts in (("qkv_proj", layer.self_attn.qkv_proj, ["q_proj", "k_proj", "v_proj"]),
                                      ("o_proj", layer.self_attn.o_proj, ["o_proj"]),
                                      ("gate_up_proj", layer.mlp.gate_up_proj, ["gate_proj", "up_proj"]),
                                      ("down_proj", layer.mlp.down_proj, ["down_proj"])):
                W = dense[f"layers.{i}.{'self_attn' if fused in ('qkv_proj', 'o_proj') else 'mlp'}.{fused}"]
                xi = x[:, : W.shape[1]].contiguous()
                delta = torch.cat([(w[(i, p)][1] @ w[(i, p)][0]) * w[(i, p)][2] if (i, p) in w else
                                   torch.zeros(size, W.shape[1]) for p, size in zip(parts, getattr(lin, "part_sizes", [W.shape[0]]))])
                got = lin.forward(xi)
                torch.testing.assert_close(got[:3], F.linear(xi[:3], W + delta), rtol=1e-5, atol=1e-5)
                assert torch.equal(got[3:], F.linear(xi, W)[3:])  # base rows: exactly the layer without LoRA
    finally:
        mgr.finish()
    assert torch.equal(model.layers[0].self_attn.qkv_proj.forward(x[:, :128]), F.linear(x[:, :128], dense["layers.0.self_attn.qkv_proj"]))


def test_pool_evicts_by_policy_and_never_a_pinned_adapter(tmp_path, model):
    refs = [LoRARef.make(n, str(tmp_path / n), pinned=(n == "p")) for n in ("p", "a", "b", "c")]
    for i, r in enumerate(refs):
        write_adapter(Path(r.lora_path), model, 2, ["q_proj"], seed=i)
    for policy, victim in (("lru", "b"), ("fifo", "a")):
        mgr = LoRAManager(model, lora_cfg(max_loras_per_batch=3, lora_eviction_policy=policy, lora_paths=refs), torch.float32, "cpu")
        p, a, b, c = (r.lora_id for r in refs)
        for ids in ([p], [a], [b], [a]):  # fills the three slots; "a" used again last (lru keeps it, fifo evicts it: loaded first)
            mgr.prepare(ids, [1])
            mgr.finish()
        mgr.prepare([c], [1])
        mgr.finish()
        resident = set(mgr.pool.slot_of)
        assert p in resident and c in resident and (a if victim == "a" else b) not in resident, policy
        assert mgr.stats() == (3, 3)
        for ids in ([a], [b], [c], [a]):
            mgr.prepare(ids, [1])
            mgr.finish()
            assert p in mgr.pool.slot_of  # pinned: never evicted


def test_rank_above_the_pool_is_refused_and_the_host_cache_is_bounded(tmp_path, model):
    big = LoRARef.make("big", str(tmp_path / "big"))
    write_adapter(tmp_path / "big", model, 16, ["q_proj"], seed=0)
    mgr = LoRAManager(model, lora_cfg(max_loaded_loras=2), torch.float32, "cpu")
    why = mgr.load(big)
    assert why is not None and "rank 16 exceeds --max-lora-rank 8" in why and big.lora_id not in mgr.refs
    missing = mgr.load(LoRARef.make("gone", str(tmp_path / "nowhere")))
    assert missing is not None and "adapter_config.json" in missing
    refs = [LoRARef.make(n, str(tmp_path / n)) for n in ("a", "b", "c")]
    for i, r in enumerate(refs):
        write_adapter(Path(r.lora_path), model, 4, ["v_proj"], seed=i)
        assert mgr.load(r) is None
        assert len(mgr.host) <= 2  # --max-loaded-loras
    mgr.prepare([refs[0].lora_id], [1])  # dropped from host memory: read from disk again
    mgr.finish()
    assert refs[0].lora_id in mgr.host and len(mgr.host) == 2


def test_admission_counts_the_base_model_as_one_adapter(model):
    mgr = LoRAManager(model, lora_cfg(max_loras_per_batch=2), torch.float32, "cpu")
    assert mgr.fits({"x", "y"}) and mgr.fits({"x", None}) and mgr.fits({None})
    assert not mgr.fits({"x", "y", None}) and not mgr.fits({"x", "y", "z"})


@pytest.mark.parametrize(("model", "served", "want"), [
    (None, "m", (None, None)), ("m", "m", ("m", None)), ("m:ad", "m", ("m", "ad")), ("m:ad:x", "m", ("m", "ad:x")),
    ("gpt-oss:120b", "gpt-oss:120b", ("gpt-oss:120b", None)), ("gpt-oss:120b:ad", "gpt-oss:120b", ("gpt-oss:120b", "ad")),
    ("other:ad", "m", ("other", "ad")), ("default", "m", ("default", None)),
])
def test_openai_model_names_split_on_the_first_colon_after_the_served_name(model, served, want):
    assert split_model(model, served) == want


def test_prefix_cache_namespaces_never_share_pages():
    class Alloc:
        def __init__(self) -> None:
            self.free_pages = list(range(100))

        def alloc(self, n):
            out, self.free_pages = self.free_pages[:n], self.free_pages[n:]
            return out

        def free(self, pages):
            self.free_pages += list(pages)

    a = Alloc()
    c = RadixCache(a, 2)
    toks = [1, 2, 3, 4]
    c.insert(toks, a.alloc(2))
    c.insert(toks, a.alloc(2), namespace="lora-a")
    assert c.match_prefix(toks)[0] != c.match_prefix(toks, "lora-a")[0]
    assert c.match_prefix(toks, "lora-b")[0] == [] and c.cached_len(toks, "lora-c") == 0 and "lora-c" not in c.ns_roots
    assert c.cached_len(toks, "lora-a") == 4 and c.cached_pages == 4
    assert c.evict(10) == 4 and c.cached_pages == 0 and c.match_prefix(toks, "lora-a")[0] == []
