"""A tiny random Llama in memory, with GGUF blocks of its weights, for the weight-format tests."""

from __future__ import annotations

from typing import Any

import gguf
import numpy as np
import torch
from gguf.quants import dequantize, quantize

from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.layers.q4_packed import q4_blocks, q8_blocks
from sglang.srt.model_executor.weight_format import WeightFormat, WeightFormatPass, _sources
from sglang.srt.models.llama import LlamaForCausalLM

Q4_1 = gguf.GGMLQuantizationType.Q4_1
Q8_0 = gguf.GGMLQuantizationType.Q8_0


def tiny_llama(dtype: torch.dtype, heads: int = 4, kv_heads: int = 2, bias: bool = False, seed: int = 0, tied: bool = False,
               tp: tuple[int, int] = (1, 0), vocab: int = 300, head_dim: int = 32) -> LlamaForCausalLM:
    cfg = ModelConfig("LlamaForCausalLM", hidden_size=128, num_hidden_layers=3, num_attention_heads=heads, num_key_value_heads=kv_heads,
                      head_dim=head_dim, intermediate_size=256, vocab_size=vocab, rope_theta=10000.0, rms_norm_eps=1e-5,
                      max_position_embeddings=1024, tie_word_embeddings=tied, attention_bias=bias)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg, tp, dtype)
    for name, p in model.named_parameters():
        p.data.copy_(1 + 0.1 * torch.randn_like(p, dtype=torch.float32) if "norm" in name else 0.08 * torch.randn_like(p, dtype=torch.float32))
    return model.eval()


def _quantized(shape: tuple[int, int], kind: Any, rng: np.random.Generator) -> tuple[np.ndarray, torch.Tensor]:
    raw = quantize((0.08 * rng.standard_normal(shape)).astype(np.float32), kind)
    return raw, torch.from_numpy(dequantize(raw, kind).copy())


def q4_checkpoint(model: LlamaForCausalLM, seed: int) -> dict[str, tuple[torch.Tensor, ...]]:
    """Give every linear layer Q4_1-representable weights (what the loader holds after dequantizing) and
    return their blocks by checkpoint name, as ``read_weights(keep_q4=True).packed_q4`` does."""
    from sglang.srt.layers.parallel import ColumnParallelLinear, RowParallelLinear

    rng = np.random.default_rng(seed)
    blocks = {}
    for name, lin in model.named_modules():
        if not isinstance(lin, (ColumnParallelLinear, RowParallelLinear)):
            continue
        sizes = lin.part_sizes if isinstance(lin, ColumnParallelLinear) else [lin.weight.shape[0]]
        dense = []
        for src, rows in zip(_sources(model, name), sizes):
            raw, w = _quantized((rows, lin.weight.shape[1]), Q4_1, rng)
            blocks[src] = q4_blocks(raw, "Q4_1", w.shape[1])
            dense.append(w)
        lin.weight.data.copy_(torch.cat(dense, 0))
    return blocks


def q8_embedding(model: LlamaForCausalLM, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Give the embedding Q8_0-representable rows and return its blocks (``read_weights().embed_q8``)."""
    raw, w = _quantized(tuple(model.embed_tokens.weight.shape), Q8_0, np.random.default_rng(seed))
    model.embed_tokens.weight.data.copy_(w)
    return q8_blocks(raw, w.shape[1])


def apply_weight_format(model: LlamaForCausalLM, blocks: dict | None, embed_q8: Any, method: str | None, max_batch: int = 8) -> WeightFormat:
    """Run the runner's weight-format pass on an already-filled model (both halves, as the runner does around loading)."""
    from sglang.srt.layers.q4_packed import PackedQ4Config

    qc = PackedQ4Config(max_batch) if method == "gguf_q4" else None
    wf = WeightFormatPass(model, blocks, embed_q8, method, qc, model.norm.weight.dtype, torch.device("cpu"))
    wf.before_load()
    return wf.after_load()


def gguf_model_and_pool(seed: int, bias: bool = False) -> tuple[LlamaForCausalLM, Any]:
    """A tiny float32 model (6 heads, 2 KV heads, tied head) on Q4 blocks through the weight-format pass, and a KV pool
    of 4096 slots whose every slot holds random K/V (a cached prefix wherever a test puts its requests)."""
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool

    model = tiny_llama(torch.float32, 6, 2, bias, seed=seed, tied=True)
    apply_weight_format(model, q4_checkpoint(model, seed), q8_embedding(model, seed), "gguf_q4")
    pool = MHATokenToKVPool(4096, 16, torch.float32, 2, 32, 3, "cpu")
    gen = torch.Generator().manual_seed(seed)
    for buf in (*pool.k_buffer, *pool.v_buffer):
        buf.copy_(torch.randn(buf.shape, generator=gen))
    return model, pool
