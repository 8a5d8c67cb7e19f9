"""How a linear layer computes ``y = x @ W.T (+ bias)``: one kernel object per layer.

Who chooses: only :class:`sglang.srt.model_executor.weight_format.WeightFormatPass`, once,
after the weights are loaded; the layers (``sglang.srt.layers.parallel``) call the object they were
given, and the fused CPU decode plan receives the same kernels as named descriptors
(:meth:`LinearKernel.specs` -> ``KernelSpec``), so the eager and fused steps run the same
arithmetic on the same tensors. A layer without a kernel object computes ``F.linear`` over its
dense ``weight`` (read at call time, so a plugin that swaps the weight is honoured).

Kinds (``kind`` is the descriptor's name in the C++ plan):

==============  ==========================================================  ===========
kind            weight                                                      batch rows
==============  ==========================================================  ===========
``dense``       ``[N, K]`` in the model dtype (``F.linear``)                  any
``onednn``      oneDNN's blocked layout (``mkldnn._linear_pointwise``)        any
``q4_f32``      GGUF Q4_0/Q4_1 blocks, exact float32 weights (C++ kernel)     any
``int4_bf16``   the same blocks for torch's int4 kernel, bfloat16 math        bounded
``q8_f32``      GGUF Q8_0 blocks, exact float32 weights (C++ kernel)          any
``q4_i8``       GGUF Q4 blocks in 8-row groups, int8 x int8 dot products      any
``q8_i8``       GGUF Q8_0 blocks in 8-row groups, int8 x int8 dot products    any
``q4_i16``      the ``q4_i8`` weights, int16 activations (int16 dot products)  any
``q8_i16``      the ``q8_i8`` weights, int16 activations                       any
``int8_rows``   per-row int8 for bfloat16 LM heads (torch's int8 kernel)      bounded
``onednn_bf16`` bfloat16 weights in oneDNN's layout for a float32 model: the   any
                rows cast to bfloat16, the product (AMX tiles) back to float32
==============  ==========================================================  ===========

:class:`BySize` composes kernels by batch rows (the first whose ``max_batch`` admits the batch).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
import torch.nn.functional as F

GROUP = 32  # weights per GGUF block


class LinearKernel:
    """One way to compute a linear layer. ``out_features`` x ``in_features`` is the local (shard) shape."""

    kind: ClassVar[str]
    max_batch = 0  # the most rows a call may have; 0: any

    def __init__(self, weight: torch.Tensor, scales: torch.Tensor | None, out_features: int, in_features: int) -> None:
        self.weight, self.scales = weight, scales
        self.out_features, self.in_features = out_features, in_features

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        raise NotImplementedError

    def nbytes(self) -> int:
        """Bytes this kernel holds (its weight and scales)."""
        # the tensors' own bytes: packed weights may be views of a shared arena (sglang.utils.hugepages)
        return sum(t.numel() * t.element_size() for t in (self.weight, self.scales) if t is not None and t.device.type != "meta")

    def describe(self) -> str:
        return self.kind

    def specs(self, kernels: Any) -> list[Any]:
        """This kernel as the fused plan's ``KernelSpec`` list (``kernels``: the loaded C++ module)."""
        return [kernels.KernelSpec(kind=self.kind, weight=self.weight, scales=self.scales, max_batch=self.max_batch,
                                   out_features=self.out_features, in_features=self.in_features)]


def _add(y: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return y if bias is None else y.add_(bias)


class Dense(LinearKernel):
    kind = "dense"

    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__(weight, None, weight.shape[0], weight.shape[1])

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return F.linear(x, self.weight, bias)


class OneDNN(LinearKernel):
    """A dense weight packed once into oneDNN's layout (see ``onednn_linear``)."""

    kind = "onednn"

    def __init__(self, packed: torch.Tensor, out_features: int, in_features: int) -> None:
        super().__init__(packed, None, out_features, in_features)

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        from sglang.srt.layers.onednn_linear import onednn_linear

        return onednn_linear(x, self.weight, bias)


class OneDNNBF16(LinearKernel):
    """A float32 layer computed in bfloat16 (``bf16`` arithmetic): ``packed`` is the bfloat16 weight in oneDNN's
    layout; each call rounds its float32 rows to bfloat16 and returns float32: oneDNN sums the exact products in
    float32 and rounds each output to bfloat16 (its output type), which is then widened and the bias added."""

    kind = "onednn_bf16"

    def __init__(self, packed: torch.Tensor, out_features: int, in_features: int) -> None:
        super().__init__(packed, None, out_features, in_features)

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        from sglang.srt.layers.onednn_linear import onednn_linear

        return _add(onednn_linear(x.to(torch.bfloat16), self.weight, None).to(x.dtype), bias)


def _cpu_kernels() -> Any:
    from sglang.srt.layers.cpu_kernels import load_decode_kernels

    return load_decode_kernels()


class Q4F32(LinearKernel):
    """GGUF Q4 blocks, float32 math: each weight is ``fma(scale, q, min)``, exactly the value the gguf
    package dequantizes, so only the summation order differs from the dense float32 product."""

    kind = "q4_f32"

    def __init__(self, nib: torch.Tensor, scale_min: torch.Tensor) -> None:
        super().__init__(nib, scale_min, nib.shape[0], nib.shape[1] * 2)
        self._ops = _cpu_kernels()

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return _add(self._ops.q4_linear_f32(x, self.weight, self.scales), bias)


class Q8F32(LinearKernel):
    """GGUF Q8_0 blocks, float32 math (``scale * q`` is exact in float32)."""

    kind = "q8_f32"

    def __init__(self, q: torch.Tensor, scale: torch.Tensor) -> None:
        super().__init__(q, scale, q.shape[0], q.shape[1])
        self._ops = _cpu_kernels()

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return _add(self._ops.q8_linear_f32(x, self.weight, self.scales), bias)


class Q4I8(LinearKernel):
    """GGUF Q4 blocks repacked in groups of 8 output rows (``q4_packed.pack_i8``), against activations
    quantized to int8 per block of 32 once per call (llama.cpp's Q4 x Q8_1): the kernel family's int8
    dot products (``cpu_kernels/isa.py``), about 0.5% relative error in each product."""

    kind = "q4_i8"

    def __init__(self, packed: torch.Tensor, scale_min: torch.Tensor, out_features: int) -> None:
        super().__init__(packed, scale_min, out_features, scale_min.shape[1] * GROUP)
        self._ops = _cpu_kernels()

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return _add(self._ops.q4_linear_i8(x, self.weight, self.scales, self.out_features), bias)


class Q8I8(LinearKernel):
    """GGUF Q8_0 blocks repacked in groups of 8 rows (``q4_packed.pack_q8_i8``), int8 activations per block
    of 32 (llama.cpp's Q8_0 x Q8_0)."""

    kind = "q8_i8"

    def __init__(self, packed: torch.Tensor, scale: torch.Tensor, out_features: int) -> None:
        super().__init__(packed, scale, out_features, scale.shape[1] * GROUP)
        self._ops = _cpu_kernels()

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return _add(self._ops.q8_linear_i8(x, self.weight, self.scales, self.out_features), bias)


class Q4I16(Q4I8):
    """The ``q4_i8`` weights (same tensors) against activations quantized to int16 per block of 32: int16 dot
    products (``cpu_kernels/csrc/int16_linear.h``), about 2e-5 relative error per product (int8: 0.5%), a
    weight costing a fraction of the instructions ``q4_f32``'s float decoding does."""

    kind = "q4_i16"

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return _add(self._ops.q4_linear_i16(x, self.weight, self.scales, self.out_features), bias)


class Q8I16(Q8I8):
    """The ``q8_i8`` weights against int16 activations per block of 32 (a Q8_0 layer's ``q4_i16``)."""

    kind = "q8_i16"

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return _add(self._ops.q8_linear_i16(x, self.weight, self.scales, self.out_features), bias)


class Int4BF16(LinearKernel):
    """GGUF Q4 blocks through torch's CPU int4 kernel (bfloat16 scales and zeros): bfloat16 models only."""

    kind = "int4_bf16"

    def __init__(self, packed: torch.Tensor, sz: torch.Tensor, out_features: int, in_features: int, max_batch: int) -> None:
        super().__init__(packed, sz, out_features, in_features)
        self.max_batch = max_batch

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return _add(torch.ops.aten._weight_int4pack_mm_for_cpu(x, self.weight, GROUP, self.scales), bias)


class Int8Rows(LinearKernel):
    """Per-row symmetric int8 of a bfloat16 weight (torch's int8 kernel): relative error below 1% of the
    row's largest value. Used for a bfloat16 model's LM head, the largest matrix of a small model."""

    kind = "int8_rows"

    def __init__(self, weight: torch.Tensor, max_batch: int) -> None:
        w = weight.detach().float()
        scale = (w.abs().amax(dim=1) / 127.0).clamp(min=1e-12)
        q = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8).contiguous()
        super().__init__(q, scale.to(torch.bfloat16), weight.shape[0], weight.shape[1])
        self.max_batch = max_batch

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return _add(torch.ops.aten._weight_int8pack_mm(x, self.weight, self.scales), bias)


class BySize(LinearKernel):
    """Kernels by batch rows: ``tiers`` in increasing ``max_batch``, then ``rest`` for larger batches."""

    def __init__(self, tiers: list[LinearKernel], rest: LinearKernel) -> None:
        assert tiers and all(t.max_batch > 0 for t in tiers) and rest.max_batch == 0, "bounded tiers, then an unbounded kernel"
        assert all((t.out_features, t.in_features) == (rest.out_features, rest.in_features) for t in tiers)
        super().__init__(rest.weight, rest.scales, rest.out_features, rest.in_features)
        self.tiers, self.rest = tiers, rest

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        rows = x.shape[0]
        for t in self.tiers:
            if rows <= t.max_batch:
                return t(x, bias)
        return self.rest(x, bias)

    def for_batch(self, rows: int) -> LinearKernel:
        return next((t for t in self.tiers if rows <= t.max_batch), self.rest)

    def nbytes(self) -> int:
        # two tiers may share one kernel's tensors (the same arithmetic on both sides of another): count them once
        seen = {t.data_ptr(): t.numel() * t.element_size()
                for k in (*self.tiers, self.rest) for t in (k.weight, k.scales) if t is not None and t.device.type != "meta"}
        return sum(seen.values())

    def describe(self) -> str:
        return ", ".join([f"{t.kind} (<= {t.max_batch} rows)" for t in self.tiers] + [f"{self.rest.kind} (more rows)"])

    def specs(self, kernels: Any) -> list[Any]:
        return [s for k in (*self.tiers, self.rest) for s in k.specs(kernels)]


def kernel_for_batch(kernel: LinearKernel | None, rows: int) -> str:
    """The kind that runs a batch of ``rows`` rows (``dense`` for a layer without a kernel object)."""
    if kernel is None:
        return "dense"
    return kernel.for_batch(rows).kind if isinstance(kernel, BySize) else kernel.kind
