"""Packed 4-bit weights: GGUF Q4_0 / Q4_1 blocks kept as they are.

A GGUF Q4 block holds 32 weights of one row: ``w = scale * q + mn`` with
``q`` in [0, 15] (Q4_1: ``mn`` stored; Q4_0: ``mn = -8 * scale``).

- bfloat16 models: torch's CPU int4 kernel computes ``(q - 8) * s + z`` with
  ``s = scale`` and ``z = mn + 8 * scale`` held in bfloat16 (``pack``).
- float32 models: this project's C++ kernel (``pack_f32``, ``q4_linear_f32``)
  computes each weight as ``fma(scale, q, mn)`` in float32, which is exactly
  the value the gguf package dequantizes, so only the summation order differs
  from the dense float32 product.
- float32 models on an integer arithmetic: the blocks repacked in groups of 8 output rows
  (``pack_i8``, ``pack_q8_i8``) for the integer kernels: ``q4_linear_i8`` / ``q8_linear_i8`` and, on the same
  tensors, ``q4_linear_i16`` / ``q8_linear_i16`` (``SGLANG_CPU_GGUF_MATH`` ``mixed``, ``mixed16``, ``int8``).
- float32 models on the ``bf16`` arithmetic (the ``amx`` family's batches): the blocks dequantized once to
  bfloat16 (``dequant_q4_bf16``, ``dequant_q8_bf16``) for oneDNN's bfloat16 GEMM (AMX tiles).

Which layer uses which is decided in one place: ``weight_format``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from sglang.utils.hugepages import Arena

GROUP = 32


@dataclass(frozen=True)
class PackedQ4Config:
    """``--quantization gguf_q4`` (what ``auto`` picks for a Q4 GGUF): linear weights stay GGUF Q4 blocks.

    float32 models compute on them at every batch size (``q4_f32``); bfloat16 models use torch's int4
    kernel up to ``max_batch`` rows and dense weights above (``weight_format``)."""

    max_batch: int = 8


def _f16_field(blocks: np.ndarray, at: int) -> np.ndarray:
    """The float16 stored at byte ``at`` of every block (``[rows, nb, bytes]``), as float32 ``[rows, nb]``."""
    return blocks[..., at : at + 2].copy().view(np.float16)[..., 0].astype(np.float32)


def q4_blocks(raw: np.ndarray, kind: str, n_cols: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Raw GGUF bytes ``[rows, bytes]`` -> (q uint8 [rows, K], scale f32 [rows, K/32], mn f32 [rows, K/32]).

    ``q`` is one byte per weight (values 0-15): the whole model's blocks wait
    in memory until every layer is packed, so int32 here would cost 4x.
    """
    rows = raw.shape[0]
    nb = n_cols // GROUP
    bsize = 18 if kind == "Q4_0" else 20
    blocks = np.ascontiguousarray(raw).reshape(rows, nb, bsize)
    scale = _f16_field(blocks, 0)
    if kind == "Q4_0":
        mn = -8.0 * scale
        qs = blocks[..., 2:18]
    else:
        mn = _f16_field(blocks, 2)
        qs = blocks[..., 4:20]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=-1).reshape(rows, n_cols)
    return torch.from_numpy(q), torch.from_numpy(scale), torch.from_numpy(mn)


def q8_blocks(raw: np.ndarray, n_cols: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Raw GGUF Q8_0 bytes ``[rows, bytes]`` -> (q int8 [rows, K], scale float32 [rows, K/32]).

    A Q8_0 block is a float16 scale and 32 int8 values, ``w = scale * q``: in
    float32 that product is exact, so ``q8_rows`` rebuilds the dequantized rows bit for bit.
    """
    rows, nb = raw.shape[0], n_cols // GROUP
    blocks = np.ascontiguousarray(raw).reshape(rows, nb, 34)
    scale = _f16_field(blocks, 0)
    q = blocks[..., 2:34].copy().view(np.int8).reshape(rows, n_cols)
    return torch.from_numpy(q), torch.from_numpy(scale)


def q8_rows(q: torch.Tensor, scale: torch.Tensor, ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Rows ``ids`` of a Q8_0 matrix, dequantized to ``dtype`` (through the exact float32 value)."""
    rq = q[ids].float()
    return (rq.view(*rq.shape[:-1], -1, GROUP) * scale[ids].unsqueeze(-1)).reshape(rq.shape).to(dtype)


def pack(q: torch.Tensor, scale: torch.Tensor, mn: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(packed int4 weight, scales-and-zeros [K/32, N, 2] bfloat16) for the CPU kernel."""
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.to(torch.int32).contiguous(), 1)
    sz = torch.stack([scale.t(), (mn + 8.0 * scale).t()], dim=-1).to(torch.bfloat16).contiguous()
    return packed, sz


def pack_f32(q: torch.Tensor, scale: torch.Tensor, mn: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(nibbles uint8 [N, K/2] in GGUF's block order, scale/min float32 [N, K/32, 2]) for the fused
    plan's float32 kernel, which computes each weight as ``fma(scale, q, min)``: exactly the float32
    value the gguf package dequantizes (the product of a float16 scale and q < 16 is exact)."""
    n, k = q.shape
    blocks = q.view(n, k // GROUP, 2, GROUP // 2)  # per block: weights 0-15, then 16-31
    nib = (blocks[:, :, 0] | (blocks[:, :, 1] << 4)).reshape(n, k // 2).contiguous()
    return nib, torch.stack([scale, mn], dim=-1).float().contiguous()


def dequant_q4_bf16(q: torch.Tensor, scale: torch.Tensor, mn: torch.Tensor) -> torch.Tensor:
    """Q4 blocks -> bfloat16 [N, K] (``bf16`` arithmetic): each weight's exact float32 value ``fma(scale, q, min)``
    rounded once to bfloat16. One output row band at a time, so the float32 intermediate stays small."""
    n, k = q.shape
    out = torch.empty(n, k, dtype=torch.bfloat16)
    for r in range(0, n, 1024):
        qb = q[r : r + 1024].view(-1, k // GROUP, GROUP).float()
        out[r : r + 1024] = torch.addcmul(mn[r : r + 1024, :, None].float(), qb, scale[r : r + 1024, :, None].float()).view(-1, k)
    return out


def dequant_q8_bf16(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Q8_0 blocks (int8 [N, K], scale [N, K/32]) -> bfloat16 [N, K], through the exact float32 value, a band at a time."""
    n, k = q.shape
    out = torch.empty(n, k, dtype=torch.bfloat16)
    for r in range(0, n, 4096):
        out[r : r + 4096] = (q[r : r + 4096].view(-1, k // GROUP, GROUP).float() * scale[r : r + 4096, :, None].float()).view(-1, k)
    return out


def _place(t: torch.Tensor, arena: Arena | None) -> torch.Tensor:
    return t if arena is None else arena.take(t)


def _as_f16(t: torch.Tensor, what: str) -> torch.Tensor:
    """``t`` in float16, which must hold it exactly: GGUF stores Q4/Q8_0 scales and Q4_1 mins in float16, and a
    Q4_0 min (-8 x scale) stays exact unless it overflows."""
    h = t.half()
    if not torch.equal(h.float(), t):
        raise ValueError(f"Q4/Q8_0 block {what} outside float16 (|x| > 65504): the integer kernels cannot take this "
                         "weight; run it with SGLANG_CPU_GGUF_MATH=float32")
    return h


def _groups_of_8(t: torch.Tensor) -> torch.Tensor:
    """``t`` [N, ...] padded with zero rows to a multiple of 8 rows."""
    pad = -t.shape[0] % 8
    return t if pad == 0 else torch.cat([t, t.new_zeros((pad, *t.shape[1:]))])


def pack_i8(q: torch.Tensor, scale: torch.Tensor, mn: torch.Tensor, arena: Arena | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Q4 blocks (``q4_blocks``) repacked for the int8 kernel ``q4_linear_i8``: output rows in groups of 8
    (the last padded with zero rows), interleaved 4 weights at a time so lane j of each dot product is
    row j. Returns (uint8 [N/8, K/32 * 128], scale/min float16 [N/8, K/32, 2, 8]: GGUF's own values, so 20
    bytes per 32 weights are streamed as in the file). Byte ``4j + i`` of a block's vector ``g`` holds row j's
    weight ``8g + i`` (low nibble) and ``8g + 4 + i`` (high). With ``arena`` both are copied into it (huge pages)."""
    n, k = q.shape
    nb = k // GROUP
    g8 = _groups_of_8(q.to(torch.uint8)).view(-1, 8, nb, 4, 2, 4)  # [G, j, b, g, half, i]
    g8 = g8.permute(0, 2, 3, 1, 5, 4)  # [G, b, g, j, i, half]
    packed = (g8[..., 0] | (g8[..., 1] << 4)).reshape(-1, nb * 128).contiguous()
    sm = torch.stack([_groups_of_8(scale.float()), _groups_of_8(mn.float())], dim=1)  # [N8, 2, nb]
    sm = sm.view(-1, 8, 2, nb).permute(0, 3, 2, 1).contiguous()  # [G, nb, 2, 8]
    return _place(packed, arena), _place(_as_f16(sm, "scales and mins"), arena)


def pack_q8_i8(q: torch.Tensor, scale: torch.Tensor, arena: Arena | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Q8_0 blocks (``q8_blocks``) repacked for ``q8_linear_i8``: rows in groups of 8, 4 bytes of each row
    in turn (bytes ``4j..4j+3`` of a block's vector ``i`` are row j's weights ``4i..4i+3``). Returns
    (int8 [N/8, K/32 * 256], scale float16 [N/8, K/32, 8]), copied into ``arena`` when given."""
    n, k = q.shape
    nb = k // GROUP
    g8 = _groups_of_8(q.to(torch.int8)).view(-1, 8, nb, 8, 4).permute(0, 2, 3, 1, 4)  # [G, b, i, j, byte]
    packed = g8.reshape(-1, nb * 256).contiguous()
    sc = _groups_of_8(scale.float()).view(-1, 8, nb).permute(0, 2, 1).contiguous()
    return _place(packed, arena), _place(_as_f16(sc, "scales"), arena)
