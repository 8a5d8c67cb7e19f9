"""The weight-format pass: which kernel each linear layer uses, decided here and nowhere else.

Who calls: the model runner, once, after the dense weights are loaded and before the KV cache is
sized (dropped dense weights free their memory first). The layers then call the kernel object they
were given (``linear_kernels``); the fused decode plan receives the same objects as descriptors.

The rule, on a CPU (other devices keep dense weights and ``F.linear``):

- ``gguf_q4`` (what ``--quantization auto``, the default, picks for a Q4_0/Q4_1 GGUF):
  float32 models compute every linear layer on the GGUF's Q4 blocks at every batch size
  (``q4_f32``: exact float32 weights, one copy, 0.75 bytes a weight), and a tied LM head on the
  embedding's Q8_0 blocks (``q8_f32``), which the embedding also looks rows up in; no dense copy is
  kept. ``cpu_kernels.isa.gguf_math`` picks the arithmetic of those kernels per batch-size bucket
  (a measured table per kernel family; ``SGLANG_CPU_GGUF_MATH`` forces one): ``int8`` runs every layer and
  the head on ``q4_i8``/``q8_i8`` (repacked copies), ``mixed`` only ``INT8_IN_MIXED``, ``mixed16`` ``INT8_IN_MIXED16`` and
  the rest on ``q4_i16``/``q8_i16`` (int16 activations, the same repacked copies), ``bf16`` every layer and the head
  on bfloat16 copies of the blocks (``onednn_bf16``: oneDNN's GEMM, AMX tiles); a layer whose
  arithmetic differs between buckets gets a ``BySize`` of both kernels. bfloat16 models use torch's int4 kernel up to ``PackedQ4Config.max_batch`` rows and dense
  weights above (``int4_bf16`` then ``onednn``/``dense``), the LM head per-row int8 the same way.
- no method (``--quantization none``): dense weights, packed once into oneDNN's layout where this CPU
  packs the dtype (float32 always); a Q8_0 embedding of a GGUF is looked up in its blocks (exact).
- hooks applied at load to code that may read a dense ``weight`` (``WEIGHT_READERS``):
  nothing is packed or dropped, every layer computes ``F.linear`` over its dense weight.

Measured on the project's 2-core AVX2 machine for a 3072x576 layer (ms per call, float32,
``bench/linear_backends.py``): ``q4_f32`` 0.09 / 0.27 / 0.76 / 2.27 against oneDNN's 0.19 / 0.31 /
0.54 / 1.82 at 1 / 8 / 16 / 64 rows, and whole decode steps are faster at every batch size
(``bench/decode_step.py``); that does not pay for a second, 4.3x larger copy of the weights.
"""

from __future__ import annotations

import copy
import functools
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from sglang.srt.layers import linear_kernels as lk

if TYPE_CHECKING:
    from sglang.utils.hugepages import Arena

logger = logging.getLogger("sglang.srt.model_executor.model_runner")

# Code that may read a linear layer's dense ``weight``: a hook applied to any
# of its functions (a LoRA, a probe) would find a ``meta`` tensor, so the
# pass keeps the dense weights instead of replacing them.
WEIGHT_READERS = (
    "sglang.srt.models.",
    "sglang.srt.layers.parallel.",
    "sglang.srt.layers.q4_packed.",
    "sglang.srt.layers.onednn_linear.",
    "sglang.srt.layers.linear_kernels.",
)


def hooks_on_weight_readers() -> list[str]:
    """Applied hook targets inside ``WEIGHT_READERS`` (empty: packing is safe)."""
    from sglang.srt.plugins.hook_registry import HookRegistry

    return sorted(t for t in HookRegistry.applied_targets() if t.startswith(WEIGHT_READERS))


@dataclass
class WeightFormat:
    """What the pass decided: the kernel description of every linear layer and LM head, by module name."""

    layers: dict[str, str] = field(default_factory=dict)
    dense_dropped: bool = False  # some dense weight was replaced (a hook reading it would find a meta tensor)
    kept_dense_for: list[str] = field(default_factory=list)  # hook targets that kept the dense weights
    auto_kv_dtype: str | None = None  # what --kv-cache-dtype auto means for these kernels (None: the model dtype)

    def summary(self) -> str:
        counts = Counter(self.layers.values())
        return "; ".join(f"{n} x {kind}" for kind, n in counts.most_common()) or "none"


def _sources(model: Any, name: str) -> list[str]:
    """Checkpoint tensor names of module ``name`` (one per fused part, from ``packed_modules_mapping``)."""
    prefix = getattr(model, "checkpoint_prefix", "")
    parent, _, leaf = name.rpartition(".")
    parts = getattr(model, "packed_modules_mapping", {}).get(leaf, [leaf])
    return [f"{prefix}{parent + '.' if parent else ''}{p}.weight" for p in parts]


def _q4_blocks(lin: Any, blocks: dict[str, Any], names: list[str]) -> tuple[torch.Tensor, ...] | None:
    """This rank's (q, scale, min) of ``lin`` when every part of it is Q4 and the shard keeps blocks whole."""
    from sglang.srt.layers.parallel import ColumnParallelLinear
    from sglang.srt.layers.q4_packed import GROUP

    if not all(n in blocks for n in names):
        return None
    parts = [blocks[n] for n in names]
    if isinstance(lin, ColumnParallelLinear):
        return tuple(lin.shard_rows([p[i] for p in parts]) for i in range(3))
    q, scale, mn = parts[0]
    out = (lin.shard_cols(q), lin.shard_cols(scale, GROUP), lin.shard_cols(mn, GROUP))
    return None if any(t is None for t in out) else tuple(t.contiguous() for t in out)


# ``mixed``: int8 only where it kept the answers (bench/quality.py, 16 prompts x 32 tokens): o and gate_up
# (59% of a layer's multiply-adds) in int8, qkv, down and the LM head in float32 measured 99.41% top-1
# agreement; with down also int8 97.85%, with every layer int8 96.48% (the bar is 98%). ``mixed16`` keeps
# the int8 layers and computes the rest with int16 activations (float32's answers at a fraction of its
# instructions: ``linear_kernels.Q4I16``). Which arithmetic runs at which batch size is ``isa.gguf_math``'s
# decision (a measured table per kernel family).
INT8_IN_MIXED = ("o_proj", "gate_up_proj")
# ``mixed16`` also takes the LM head to int8 (the same bench, 16 prompts x 32 tokens: 99.02% agreement with the head
# on int16 or int8, KL 0.0010 -> 0.0014; under ``mixed`` the int8 head measured 97.66%, so there it stays float32).
# At 16 rows the int16 head was compute-bound near the int16 dot-product peak: 5.7 of a 31 ms step, 3.7 on int8.
INT8_IN_MIXED16 = (*INT8_IN_MIXED, "lm_head")


def activation(math: str, name: str) -> str:
    """What module ``name`` (``lm_head`` for the head) multiplies its weights with under arithmetic ``math``:
    ``f32`` (the exact weights decoded to float32), ``i8`` or ``i16`` (activations quantized per block of 32) or
    ``bf16`` (bfloat16 weights and activations, float32 sums)."""
    if math == "int8":
        return "i8"
    if math in ("bf16", "int16"):
        return math.replace("int16", "i16")
    if name.rpartition(".")[2] in {"mixed": INT8_IN_MIXED, "mixed16": INT8_IN_MIXED16}.get(math, ()):
        return "i8"
    return "i16" if math == "mixed16" else "f32"


def by_tiers(tiers: list[tuple[int, str]], make: Callable[[str], lk.LinearKernel]) -> lk.LinearKernel:
    """One kernel per run of batch sizes (``tiers``: (most rows, activation), the last 0: any), built once per
    activation by ``make`` (the integer kernels share one repacked copy; it and the float32 blocks are both
    kept only when both run)."""
    merged: list[tuple[int, str]] = []
    for most, act in tiers:
        merged = [*merged[:-1], (most, act)] if merged and merged[-1][1] == act else [*merged, (most, act)]
    built = {act: make(act) for act in {act for _, act in merged}}
    if len(merged) == 1:
        return built[merged[0][1]]
    bounded = []
    for most, act in merged[:-1]:
        k = copy.copy(built[act])  # the same tensors, its own bound
        k.max_batch = most
        bounded.append(k)
    return lk.BySize(bounded, built[merged[-1][1]])


def _bf16(weight: torch.Tensor) -> lk.LinearKernel:
    """The ``bf16`` arithmetic's kernel of a bfloat16 ``weight`` [N, K], packed once for oneDNN."""
    from sglang.srt.layers.onednn_linear import prepack

    return lk.OneDNNBF16(prepack(weight, 64), weight.shape[0], weight.shape[1])


class _Pass:
    def __init__(self, method: str | None, quant_config: Any, dtype: torch.dtype, device: torch.device) -> None:
        from sglang.srt.layers import onednn_linear

        self.method, self.dtype = method, dtype
        self.max_batch = getattr(quant_config, "max_batch", 8)
        self.onednn = device.type == "cpu" and onednn_linear.available() and onednn_linear.packs(dtype)
        self.exact_q = dtype == torch.float32 and method == "gguf_q4" and self._cpu_kernels()
        self.tiers: list[tuple[int, str]] = [(0, "float32")]  # (most rows, arithmetic), the last: any batch
        self.auto_kv_dtype: str | None = None
        self.arena: Arena | None = None  # the integer kernels' repacked weights, laid end to end on huge pages
        if self.exact_q:
            from sglang.utils.hugepages import Arena

            self.arena = Arena()
            from sglang.srt.layers.cpu_kernels import isa, load_decode_kernels

            plan = isa.host_gguf_math(load_decode_kernels().FAMILY)
            self.tiers = plan.tiers()
            if any(m == "bf16" for _, m in self.tiers) and not onednn_linear.packs(torch.bfloat16):
                raise ValueError(f"{isa.MATH_ENV}: the bf16 arithmetic needs oneDNN's bfloat16 GEMM, which this CPU lacks "
                                 f"(it needs AVX-512 BF16 or AMX); use {isa.MATH_ENV}=auto")
            self.auto_kv_dtype = isa.auto_kv_dtype(plan)
            logger.info("GGUF kernels: %s; KV cache %s under --kv-cache-dtype auto", plan.format(), self.auto_kv_dtype)

    @staticmethod
    def _cpu_kernels() -> bool:
        from sglang.srt.layers.cpu_kernels import KernelBuildError, load_decode_kernels

        try:
            load_decode_kernels()
            return True
        except KernelBuildError as e:
            logger.warning("GGUF Q4 weights dequantized: the float32 Q4 kernel is unavailable (%s)", e)
            return False

    def dense(self, lin: Any) -> tuple[lk.LinearKernel | None, bool]:
        """The dense kernel of ``lin`` and whether it holds the weight itself (the dense copy may go)."""
        from sglang.srt.layers.onednn_linear import prepack

        w = lin.weight
        if w.is_meta:
            return None, False
        if self.onednn:
            return lk.OneDNN(prepack(w, 64), w.shape[0], w.shape[1]), True
        return None, False

    def linear(self, lin: Any, q4: tuple[torch.Tensor, ...] | None, name: str = "") -> tuple[lk.LinearKernel | None, bool]:
        from sglang.srt.layers.q4_packed import dequant_q4_bf16, pack, pack_f32, pack_i8

        if q4 is not None and self.exact_q:
            n, k = q4[0].shape
            packed = functools.cache(lambda: pack_i8(*q4, arena=self.arena))  # one repacked copy for the int8 and int16 kernels
            integer = {"i8": lk.Q4I8, "i16": lk.Q4I16}

            def make(act: str) -> lk.LinearKernel:
                if act in integer:
                    return integer[act](*packed(), n)
                return _bf16(dequant_q4_bf16(*q4)) if act == "bf16" else lk.Q4F32(*pack_f32(*q4))

            return by_tiers([(most, activation(m, name)) for most, m in self.tiers], make), True
        if q4 is not None and self.method == "gguf_q4" and self.dtype == torch.bfloat16:
            n, k = q4[0].shape
            small = lk.Int4BF16(*pack(*q4), n, k, self.max_batch)
            rest, owns = self.dense(lin)
            return lk.BySize([small], rest or lk.Dense(lin.weight)), owns
        return self.dense(lin)

    def q8_head(self, q: torch.Tensor, scale: torch.Tensor) -> lk.LinearKernel:
        """The float32 kernel of a tied LM head on the embedding's Q8_0 blocks (the int8 one holds a repacked copy;
        the embedding keeps looking rows up in the blocks)."""
        from sglang.srt.layers.q4_packed import dequant_q8_bf16, pack_q8_i8

        packed = functools.cache(lambda: pack_q8_i8(q, scale, arena=self.arena))
        integer = {"i8": lk.Q8I8, "i16": lk.Q8I16}

        def make(act: str) -> lk.LinearKernel:
            if act in integer:
                return integer[act](*packed(), q.shape[0])
            return _bf16(dequant_q8_bf16(q, scale)) if act == "bf16" else lk.Q8F32(q, scale)

        return by_tiers([(most, activation(m, "lm_head")) for most, m in self.tiers], make)

    def lm_head(self, head: Any, embed_q8: tuple[torch.Tensor, torch.Tensor] | None) -> tuple[lk.LinearKernel | None, bool]:
        emb = head.embedding
        if embed_q8 is not None and head.tied and self.dtype == torch.float32 and self.onednn:
            # exact lookups from the GGUF's blocks; the dense matrix is now the head's alone, and its kernel replaces it
            emb.set_q8(*embed_q8)
        if self.method == "gguf_q4" and self.dtype == torch.bfloat16 and not head.weight.is_meta:
            rest, owns = self.dense(head)
            return lk.BySize([lk.Int8Rows(head.weight, self.max_batch)], rest or lk.Dense(head.weight)), owns
        return self.dense(head)


class WeightFormatPass:
    """The pass, in two halves around ``model.load_weights``. Who calls: the model runner, once.

    ``before_load`` gives the layers whose kernel holds every byte it needs (float32 Q4 / Q8_0 blocks)
    their kernel and drops their dense weight first, so loading never fills it (peak memory stays one
    tensor's dequantization above the blocks); ``after_load`` decides every other layer.
    """

    def __init__(self, model: torch.nn.Module, blocks: dict[str, Any] | None, embed_q8: Any, method: str | None,
                 quant_config: Any, dtype: torch.dtype, device: torch.device) -> None:
        self.model, self.blocks, self.embed_q8 = model, blocks or {}, embed_q8
        self.fmt = WeightFormat()
        self.active = device.type == "cpu"
        if self.active and (hooked := hooks_on_weight_readers()):
            self.fmt.kept_dense_for = hooked
            self.active = False
            logger.info("weight format: dense weights kept (F.linear) for the hooks on %s", ", ".join(hooked))
        self.p = _Pass(method, quant_config, dtype, device) if self.active else None
        self.fmt.auto_kv_dtype = self.p.auto_kv_dtype if self.p is not None else None

    def _modules(self) -> list[tuple[str, Any]]:
        from sglang.srt.layers.parallel import ColumnParallelLinear, ParallelLMHead, RowParallelLinear

        return [(n, m) for n, m in self.model.named_modules() if isinstance(m, (ColumnParallelLinear, RowParallelLinear, ParallelLMHead))]

    def _set(self, name: str, mod: Any, kernel: lk.LinearKernel | None, owns: bool) -> None:
        if kernel is not None:
            mod.set_kernel(kernel, drop_dense=owns)
            self.fmt.dense_dropped |= owns
        self.fmt.layers[name] = kernel.describe() if kernel is not None else "dense"

    def _take_q4(self, name: str, mod: Any) -> tuple[torch.Tensor, ...] | None:
        """This rank's Q4 blocks of module ``name`` (None: not all Q4), consumed only when used."""
        names = _sources(self.model, name)
        q4 = _q4_blocks(mod, self.blocks, names)
        if q4 is not None:
            for n in names:
                del self.blocks[n]
        return q4

    def before_load(self) -> None:
        from sglang.srt.layers.parallel import ParallelLMHead

        if self.p is None or not self.p.exact_q:
            return
        for name, mod in self._modules():
            if isinstance(mod, ParallelLMHead):
                if mod.tied and self.embed_q8 is not None:
                    mod.embedding.set_q8(*self.embed_q8)
                    self._set(name, mod, self.p.q8_head(*mod.embedding.q8), True)
                continue
            if (q4 := self._take_q4(name, mod)) is not None:
                self._set(name, mod, *self.p.linear(mod, q4, name))

    def after_load(self) -> WeightFormat:
        from sglang.srt.layers.parallel import ParallelLMHead

        if self.p is not None:
            for name, mod in self._modules():
                if name in self.fmt.layers:
                    continue
                if isinstance(mod, ParallelLMHead):
                    self._set(name, mod, *self.p.lm_head(mod, self.embed_q8))
                else:
                    self._set(name, mod, *self.p.linear(mod, self._take_q4(name, mod), name))
        self.blocks.clear()
        logger.info("weight format: %s", self.fmt.summary())
        return self.fmt
