"""Tensor-parallel linear layers and the vocab-parallel embedding / LM head.

Weights are loaded from full (unsharded) tensors: each rank slices its shard.
Column-parallel layers split output features and keep their output sharded;
row-parallel layers split input features and all-reduce their output.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from sglang.srt.distributed.communication_op import tensor_model_parallel_all_gather, tensor_model_parallel_all_reduce
from sglang.srt.layers.linear_kernels import LinearKernel
from sglang.srt.layers.q4_packed import q8_rows


def _meta_like(t: torch.Tensor) -> nn.Parameter:
    """A stand-in for a dropped dense weight: same shape and dtype, no memory."""
    return nn.Parameter(torch.empty(t.shape, dtype=t.dtype, device="meta"), requires_grad=False)


class _KernelMixin:
    """The layer's kernel object (``linear_kernels``), set once by the weight-format pass; None: ``F.linear``
    over the dense ``weight``."""

    kernel: LinearKernel | None = None
    weight: nn.Parameter
    # set by the LoRA manager (sglang.srt.lora.layers.LoRALinear) on layers adapters may touch; it adds
    # the adapter products of a forward with adapter rows and nothing otherwise
    lora: Any = None

    def set_kernel(self, kernel: LinearKernel, drop_dense: bool) -> None:
        """Compute through ``kernel``; ``drop_dense``: it holds every byte it needs, the dense weight goes
        (a ``meta`` tensor of the same shape stays, so shape checks still work). Who calls: the weight-format pass."""
        self.kernel = kernel
        if drop_dense:
            self.weight = _meta_like(self.weight)

    def _mm(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        if self.kernel is not None:
            return self.kernel(x, bias)
        return F.linear(x, self.weight, bias)


def _shard(n: int, tp_size: int, tp_rank: int, what: str) -> slice:
    if n % tp_size:
        raise ValueError(f"{what} ({n}) is not divisible by --tp-size {tp_size}; choose a tp size that divides it")
    size = n // tp_size
    return slice(tp_rank * size, (tp_rank + 1) * size)


class ColumnParallelLinear(_KernelMixin, nn.Module):
    """``y = x @ W.T`` with W's rows (outputs) split across ranks; fused parts split each."""

    def __init__(self, in_features: int, part_sizes: list[int], bias: bool, tp_size: int, tp_rank: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.part_sizes, self.tp_size, self.tp_rank = part_sizes, tp_size, tp_rank
        local = [p // tp_size for p in part_sizes]
        self.weight = nn.Parameter(torch.empty(sum(local), in_features, dtype=dtype), requires_grad=False)
        self.bias = nn.Parameter(torch.zeros(sum(local), dtype=dtype), requires_grad=False) if bias else None

    def load(self, weights: list[torch.Tensor | None], biases: list[torch.Tensor] | None = None) -> None:
        """``weights``: one full tensor per fused part (e.g. q, k, v); a weight already replaced by a kernel is not
        filled (its parts may be None: the loader does not dequantize them)."""
        if not self.weight.is_meta:
            self.weight.data.copy_(self.shard_rows([w for w in weights if w is not None]))
        if self.bias is not None and biases is not None:
            self.bias.data.copy_(torch.cat([b[_shard(b.shape[0], self.tp_size, self.tp_rank, "bias")] for b in biases], 0))

    def shard_rows(self, parts: list[torch.Tensor]) -> torch.Tensor:
        """This rank's output rows of per-part full tensors (weights, or their quantized blocks), concatenated."""
        return torch.cat([t[_shard(t.shape[0], self.tp_size, self.tp_rank, "output features")] for t in parts], 0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self._mm(x, self.bias)
        return out if self.lora is None else self.lora.apply(x, out)


class RowParallelLinear(_KernelMixin, nn.Module):
    """``y = all_reduce(x_shard @ W_shard.T)`` with W's columns (inputs) split across ranks."""

    def __init__(self, in_features: int, out_features: int, tp_size: int, tp_rank: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.tp_size, self.tp_rank = tp_size, tp_rank
        self.weight = nn.Parameter(torch.empty(out_features, in_features // tp_size, dtype=dtype), requires_grad=False)

    def load(self, weight: torch.Tensor | None) -> None:
        """``weight``: the full tensor; None (not dequantized) where a kernel replaced the weight before loading."""
        if not self.weight.is_meta:  # not replaced by a kernel before loading
            assert weight is not None
            self.weight.data.copy_(weight[:, _shard(weight.shape[1], self.tp_size, self.tp_rank, "input features")])

    def shard_cols(self, t: torch.Tensor, per_col: int = 1) -> torch.Tensor | None:
        """This rank's input columns of a full tensor holding one entry per ``per_col`` weights (1: weights,
        32: a block's scales); None when the shard would split such a group (at either end)."""
        cols = _shard(t.shape[1] * per_col, self.tp_size, self.tp_rank, "input features")
        if cols.start % per_col or cols.stop % per_col:
            return None
        return t[:, cols.start // per_col : cols.stop // per_col]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self._mm(x, None)
        if self.lora is not None:  # LoRA runs with --tp-size 1 only (sglang.srt.arg_groups.lora_hook)
            out = self.lora.apply(x, out)
        return tensor_model_parallel_all_reduce(out)


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

    def load(self, weight: torch.Tensor | None) -> None:
        """``weight``: the full matrix; None (not dequantized) once ``set_q8`` replaced the dense rows."""
        if self.weight.is_meta:  # rows come from quantized blocks (set_q8)
            return
        assert weight is not None
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
        self.weight = _meta_like(self.weight)

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


class ParallelLMHead(_KernelMixin, nn.Module):
    """Logits over this rank's vocabulary shard, gathered to the full vocabulary."""

    def __init__(self, embedding: VocabParallelEmbedding, tied: bool, hidden: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.embedding = embedding
        self.tied = tied  # the checkpoint has no LM head of its own: the embedding's matrix serves both
        self.weight = embedding.weight if tied else nn.Parameter(torch.zeros_like(embedding.weight), requires_grad=False)

    def load(self, weight: torch.Tensor) -> None:
        part = weight[self.embedding.start : self.embedding.start + self.embedding.shard_size]
        self.weight.data[: part.shape[0]].copy_(part)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        logits = self._mm(h, None)
        if self.embedding.tp_size > 1:
            logits = tensor_model_parallel_all_gather(logits, dim=-1)
        return logits[..., : self.embedding.vocab_size]
