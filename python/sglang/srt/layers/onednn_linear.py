"""Linear layers on CPU through oneDNN with weights packed once at load.

``F.linear`` on a CPU sends float32 to MKL's sgemm and bfloat16 to oneDNN
with a plain weight it reorders on every call. Packing each weight once into
oneDNN's blocked layout (``mkldnn._reorder_linear_weight``, the op
``torch.compile``'s CPU freezing uses) and calling
``mkldnn._linear_pointwise`` measured 2-3x faster for float32 on this
project's machine (MKL takes a slow path on AMD CPUs) and 1.1-1.8x for
bfloat16, whose results stay bit-identical (same oneDNN kernels). float32
results differ from MKL's in summation order only.

The packed copy replaces the dense weight: the module keeps a ``meta``
tensor of the same shape as ``weight`` (so shape checks still work and
memory does not double). Who packs: the weight-format pass
(``sglang.srt.model_executor.weight_format``), once, after every weight is
loaded, and only when no hook is applied to code that may read a dense
weight (``weight_format.hooks_on_weight_readers``).
"""

from __future__ import annotations

import torch


def packs(dtype: torch.dtype) -> bool:
    """Whether weights of ``dtype`` can be packed on this CPU: float32 always; bfloat16 only where
    oneDNN has a bfloat16 path (AVX-512 BW/VL/DQ or AVX-NE-CONVERT; an AVX2-only CPU has none)."""
    if dtype is torch.float32:
        return True
    return dtype is torch.bfloat16 and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())

def available() -> bool:
    """oneDNN is built into this torch and exposes the packing ops."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")


def prepack(weight: torch.Tensor, batch_hint: int) -> torch.Tensor:
    """``weight`` [N, K] float32/bfloat16 -> oneDNN tensor in the layout its kernel wants for ``batch_hint`` rows."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(), batch_hint)


def onednn_linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``x @ W.T (+ bias)`` for ``x`` [..., K] in the packed weight's dtype."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [None], "")
