"""Tensor-parallel linear layers and the vocab-parallel embedding / LM head.

Weights are loaded from full (unsharded) tensors: each rank slices its shard.
Column-parallel layers split output features and keep their output sharded;
row-parallel layers split input features and all-reduce their output.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from sglang.srt.distributed.communication_op import tensor_model_parallel_all_gather, tensor_model_parallel_all_reduce
from sglang.srt.layers.onednn_linear import onednn_linear
from sglang.srt.layers.q4_packed import F32_MAX_BATCH, GROUP, pack, pack_f32, q4_linear, q8_rows

Q4 = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # (q [N, K] uint8 in 0-15, scale [N, K/32], mn [N, K/32])


class _PackedMixin:
    """Optional packed copies of the weight: 4-bit for batches up to ``q4_max_batch``
    tokens (``--quantization gguf_q4``), and oneDNN's layout on CPU for the rest."""

    q4: tuple[torch.Tensor, torch.Tensor] | None = None
    q4_max_batch = 0
    onednn: torch.Tensor | None = None
    weight: nn.Parameter

    def set_onednn(self, packed: torch.Tensor) -> None:
        """Use ``packed`` (``onednn_linear.prepack``) instead of the dense weight, which is dropped (shape kept on ``meta``)."""
        self.onednn = packed
        self.weight = nn.Parameter(torch.empty(self.weight.shape, dtype=self.weight.dtype, device="meta"), requires_grad=False)

    def _set_q4(self, q: torch.Tensor, scale: torch.Tensor, mn: torch.Tensor, max_batch: int) -> None:
        # bfloat16: torch's int4 kernel, here and in the fused plan; float32: the plan's exact kernel only
        f32 = self.weight.dtype == torch.float32
        self.q4 = pack_f32(q, scale, mn) if f32 else pack(q, scale, mn)
        self.q4_max_batch = min(max_batch, F32_MAX_BATCH) if f32 else max_batch

    def _mm(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        if self.q4 is not None and x.shape[0] <= self.q4_max_batch and x.dtype == torch.bfloat16:
            y = q4_linear(x, *self.q4)
            return y if bias is None else y + bias
        if self.onednn is not None:
            return onednn_linear(x, self.onednn, bias)
        return F.linear(x, weight, bias)


def _shard(n: int, tp_size: int, tp_rank: int, what: str) -> slice:
    if n % tp_size:
        raise ValueError(f"{what} ({n}) is not divisible by --tp-size {tp_size}; choose a tp size that divides it")
    size = n // tp_size
    return slice(tp_rank * size, (tp_rank + 1) * size)


class ColumnParallelLinear(_PackedMixin, nn.Module):
    """``y = x @ W.T`` with W's rows (outputs) split across ranks; fused parts split each."""

    def __init__(self, in_features: int, part_sizes: list[int], bias: bool, tp_size: int, tp_rank: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.part_sizes, self.tp_size, self.tp_rank = part_sizes, tp_size, tp_rank
        local = [p // tp_size for p in part_sizes]
        self.weight = nn.Parameter(torch.empty(sum(local), in_features, dtype=dtype), requires_grad=False)
        self.bias = nn.Parameter(torch.zeros(sum(local), dtype=dtype), requires_grad=False) if bias else None

    def load(self, weights: list[torch.Tensor], biases: list[torch.Tensor] | None = None) -> None:
        """``weights``: one full tensor per fused part (e.g. q, k, v)."""
        rows = [w[_shard(w.shape[0], self.tp_size, self.tp_rank, "output features")] for w in weights]
        self.weight.data.copy_(torch.cat(rows, 0))
        if self.bias is not None and biases is not None:
            self.bias.data.copy_(torch.cat([b[_shard(b.shape[0], self.tp_size, self.tp_rank, "bias")] for b in biases], 0))

    def load_q4(self, parts: list[Q4], max_batch: int) -> None:
        """The packed copy: each fused part's rows sharded like ``load``."""
        cut = [[t[_shard(t.shape[0], self.tp_size, self.tp_rank, "output features")] for t in part] for part in parts]
        self._set_q4(*(torch.cat([c[i] for c in cut], 0) for i in range(3)), max_batch)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._mm(x, self.weight, self.bias)


class RowParallelLinear(_PackedMixin, nn.Module):
    """``y = all_reduce(x_shard @ W_shard.T)`` with W's columns (inputs) split across ranks."""

    def __init__(self, in_features: int, out_features: int, tp_size: int, tp_rank: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.tp_size, self.tp_rank = tp_size, tp_rank
        self.weight = nn.Parameter(torch.empty(out_features, in_features // tp_size, dtype=dtype), requires_grad=False)

    def load(self, weight: torch.Tensor) -> None:
        self.weight.data.copy_(weight[:, _shard(weight.shape[1], self.tp_size, self.tp_rank, "input features")])

    def load_q4(self, part: Q4, max_batch: int) -> None:
        q, scale, mn = part
        cols = _shard(q.shape[1], self.tp_size, self.tp_rank, "input features")
        if cols.start % GROUP:
            return  # the shard would split a 32-weight block: dense only
        groups = slice(cols.start // GROUP, cols.stop // GROUP)
        self._set_q4(q[:, cols], scale[:, groups], mn[:, groups], max_batch)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return tensor_model_parallel_all_reduce(self._mm(x, self.weight, None))


class VocabParallelEmbedding(nn.Module):
    """Rows of the embedding split by vocabulary range; out-of-range ids contribute zeros."""

    def __init__(self, vocab_size: int, hidden: int, tp_size: int, tp_rank: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.tp_size = tp_size
        self.shard_size = -(-vocab_size // tp_size)  # ceil: the last shard is padded
        self.start = tp_rank * self.shard_size
        self.vocab_size = vocab_size
        self.weight = nn.Parameter(torch.zeros(self.shard_size, hidden, dtype=dtype), requires_grad=False)

    q8: tuple[torch.Tensor, torch.Tensor] | None = None  # this shard as GGUF Q8_0 (int8 [rows, H], scale [rows, H/32])

    def load(self, weight: torch.Tensor) -> None:
        part = weight[self.start : self.start + self.shard_size]
        self.weight.data[: part.shape[0]].copy_(part)

    def set_q8(self, q: torch.Tensor, scale: torch.Tensor) -> None:
        """Look rows up in the full matrix's GGUF Q8_0 blocks instead of the dense weight, which is dropped.

        Exact: a row is rebuilt through the float32 value the gguf package
        dequantizes (``q8_rows``). Memory: 9 bits a value (int8, a float32 scale per 32) instead of 16 or 32.
        """
        rows = slice(self.start, self.start + self.shard_size)
        qs, ss = q[rows], scale[rows]
        pad = self.shard_size - qs.shape[0]  # the last shard's padding rows stay zero
        self.q8 = (F.pad(qs, (0, 0, 0, pad)).contiguous(), F.pad(ss, (0, 0, 0, pad)).contiguous())
        self.weight = nn.Parameter(torch.empty(self.weight.shape, dtype=self.weight.dtype, device="meta"), requires_grad=False)

    def _rows(self, ids: torch.Tensor) -> torch.Tensor:
        return q8_rows(*self.q8, ids, self.weight.dtype) if self.q8 is not None else F.embedding(ids, self.weight)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if self.tp_size == 1:
            return self._rows(ids)
        local = ids - self.start
        outside = (local < 0) | (local >= self.shard_size)
        out = self._rows(local.masked_fill(outside, 0))
        out.masked_fill_(outside.unsqueeze(-1), 0)
        return tensor_model_parallel_all_reduce(out)


class ParallelLMHead(nn.Module):
    """Logits over this rank's vocabulary shard, gathered to the full vocabulary."""

    def __init__(self, embedding: VocabParallelEmbedding, tied: bool, hidden: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.embedding = embedding
        self.weight = embedding.weight if tied else nn.Parameter(torch.zeros_like(embedding.weight), requires_grad=False)

    q8: torch.Tensor | None = None
    q8_scale: torch.Tensor | None = None
    q8_max_batch = 0
    onednn: torch.Tensor | None = None

    def set_onednn(self, packed: torch.Tensor) -> None:
        """Logits through ``packed`` (``onednn_linear.prepack``); an untied dense weight is dropped, a tied one stays the embedding's."""
        self.onednn = packed
        if self.weight is not self.embedding.weight:
            self.weight = nn.Parameter(torch.empty(self.weight.shape, dtype=self.weight.dtype, device="meta"), requires_grad=False)

    def load(self, weight: torch.Tensor) -> None:
        part = weight[self.embedding.start : self.embedding.start + self.embedding.shard_size]
        self.weight.data[: part.shape[0]].copy_(part)

    def load_int8(self, max_batch: int) -> None:
        """Keep a per-row int8 copy of the (bfloat16) weight for decode batches up to ``max_batch`` rows.

        The LM head is the largest matrix of a small model: at batch 1 it reads
        its whole weight for one row of logits, so halving the bytes halves
        its time. Per-row symmetric scales: relative error below 1% of the
        largest logit, opt-in with ``--quantization gguf_q4``.
        """
        w = self.weight.detach().float()
        scale = (w.abs().amax(dim=1) / 127.0).clamp(min=1e-12)
        self.q8 = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8).contiguous()
        self.q8_scale = scale.to(torch.bfloat16)
        self.q8_max_batch = max_batch

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        if self.q8 is not None and h.shape[0] <= self.q8_max_batch and h.dtype == torch.bfloat16:
            logits = torch.ops.aten._weight_int8pack_mm(h, self.q8, self.q8_scale)
        elif self.onednn is not None:
            logits = onednn_linear(h, self.onednn, None)
        else:
            logits = F.linear(h, self.weight)
        if self.embedding.tp_size > 1:
            logits = tensor_model_parallel_all_gather(logits, dim=-1)
        return logits[..., : self.embedding.vocab_size]
