"""The fused CPU decode step: every layer of a decode forward in one C++ call.

On a CPU the eager decode step of a small model is bound by dispatching about
50 torch ops a layer from Python, not by arithmetic; the fused plan
(``sglang.srt.layers.cpu_kernels``) runs the same computation (ATen for the
matrix products, loops for norms, rotary, the KV write and paged attention)
without returning to Python between layers. It is the CPU counterpart of
replaying a captured graph. Short prefills run through the same plan, one row
per new token (:meth:`FusedDecode.run_extend`).

With ``--enable-lora`` the plan holds the adapter slot pool's buffers and adds the adapter products
``B[s](A[s]x)`` after each linear layer an adapter targets, for the rows whose request names slot ``s``
(``csrc/lora_product.h``, rows grouped by slot once per forward), so forwards with adapter rows run fused
too. It computes what the default ``torch_native`` LoRA backend computes; a plugin's backend
(``--lora-backend``) keeps adapter forwards on the eager model, which calls it.

``--fused-decode auto`` (default) uses it when the runner qualifies and the
kernels build, and logs why not otherwise; ``on`` makes any reason a start-up
error; ``off`` keeps the eager step. It stands aside wherever a plugin could
be bypassed: a non-default attention backend or KV pool, a model part
replaced by a subclass, a hook applied inside the code the plan stands in for
(``PLAN_MODULES``), ``--enable-torch-compile``.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

logger = logging.getLogger(__name__)

# The modules whose code a decode plan stands in for: a hook applied to any of
# their functions would silently stop running, so the plan stands aside instead.
PLAN_MODULES = (
    "sglang.srt.models.llama",
    "sglang.srt.layers.basic",
    "sglang.srt.layers.parallel",
    "sglang.srt.layers.q4_packed",
    "sglang.srt.layers.onednn_linear",
    "sglang.srt.layers.linear_kernels",  # the plan calls each layer's kernel itself
    "sglang.srt.layers.attention.torch_native_backend",
    "sglang.srt.mem_cache.memory_pool",
    "sglang.srt.lora.layers",  # the plan adds the adapter products itself
    "sglang.srt.lora.backend",
)
# the pool's fused layer names -> the plan's linear names (DecodePlan.set_lora)
LORA_LINEARS = {"qkv_proj": "qkv", "o_proj": "o", "gate_up_proj": "gate_up", "down_proj": "down"}


# Prefill through the plan: each new token is a row with its request's whole slot list ([rows, width]
# int64), so only forwards whose index stays under this many entries (8 MiB) run fused; longer ones
# are bound by their matrix products, not by per-op dispatch, and run eagerly.
EXTEND_INDEX_LIMIT = 1 << 20


class FusedDecodeError(RuntimeError):
    """``--fused-decode on`` was asked for and this runner cannot have it."""


def ineligibility(runner: Any) -> list[str]:
    """Why ``runner`` cannot use the fused step (empty: it can). Checks only; builds nothing."""
    import torch

    from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
    from sglang.srt.plugins.hook_registry import HookRegistry
    from sglang.srt.runtime_context import get_exec

    why = []
    if runner.device.type != "cpu":
        why.append(f"the device is {runner.device.type}, not cpu")
    if runner.tp_size != 1:
        why.append(f"--tp-size is {runner.tp_size} (the plan has no all-reduce between layers)")
    if type(runner.attn) is not TorchNativeAttnBackend:
        why.append(f"the attention backend is {runner.attention_backend!r} (the plan computes torch_native attention itself)")
    if type(runner.kv_pool).set_kv_buffer is not MHATokenToKVPool.set_kv_buffer:
        why.append(f"the KV pool {type(runner.kv_pool).__qualname__} writes KV its own way")
    if runner.kv_cache_dtype != runner.dtype and (runner.dtype, runner.kv_cache_dtype) != (torch.float32, torch.bfloat16):
        why.append(f"--kv-cache-dtype ({runner.kv_cache_dtype}) differs from the model dtype ({runner.dtype}); the plan reads a "
                   "bfloat16 cache under a float32 model only")
    if runner.dtype not in (torch.float32, torch.bfloat16):
        why.append(f"the dtype is {runner.dtype} (the plan runs float32 and bfloat16)")
    if not hasattr(runner.model, "build_decode_plan"):
        why.append(f"{type(runner.model).__name__} has no decode plan")
    else:
        why += runner.model.decode_plan_blockers()
        if runner.model_config.head_dim % 16:
            why.append(f"the head size {runner.model_config.head_dim} is not a multiple of 16")
    hooked = [t for t in HookRegistry.applied_targets() if t.startswith(tuple(m + "." for m in PLAN_MODULES))]
    if hooked:
        why.append(f"hooks are applied to {', '.join(sorted(hooked))}, which the plan would bypass")
    if get_exec().compile.enable_torch_compile:
        why.append("--enable-torch-compile is set (the compiled step is used instead)")
    return why


class FusedDecode:
    """The runner's fused decode step; ``create`` returns None where it does not apply."""

    def __init__(self, model: Any, plan: Any, extend: bool, lora: bool = False, argmax: Any = None) -> None:
        self.model = model
        self.plan = plan
        self.argmax = argmax  # the kernels' argmax_rows: greedy sampling's row maxima (sampler.greedy)
        self.extend = extend  # short prefills through the plan too (float32 models)
        self.lora = lora  # the plan holds the LoRA pool and adds the adapter products
        self.adapter_forwards = 0  # forwards with adapter rows run through the plan (tests read it)

    @classmethod
    def create(cls, runner: Any, mode: str) -> FusedDecode | None:
        """Build the plan for ``runner`` under ``--fused-decode mode`` (auto|on|off)."""
        if mode == "off":
            logger.info("fused decode: off (--fused-decode off)")
            return None
        why = ineligibility(runner)
        kernels, build_failed = None, False
        if not why:
            from sglang.srt.layers.cpu_kernels import KernelBuildError, load_decode_kernels

            try:
                kernels = load_decode_kernels()
            except KernelBuildError as e:
                why.append(str(e))
                build_failed = True
        if why:
            if mode == "on":
                raise FusedDecodeError("--fused-decode on, but this runner cannot use it: " + "; ".join(why) +
                                       " (use --fused-decode auto to fall back to the eager step)")
            # a runner that does not qualify is expected; a failed build is worth a warning
            (logger.warning if build_failed else logger.info)("fused decode: not used, eager decode steps instead: %s", "; ".join(why))
            return None
        import torch

        plan = runner.model.build_decode_plan(kernels, runner.kv_pool)
        extend = runner.dtype == torch.float32
        lora, note = attach_lora(plan, getattr(runner, "lora_manager", None))
        logger.info("fused decode: on (%d layers in one C++ call per decode step%s%s)", plan.num_layers(),
                    " and short prefill" if extend else "; prefills eager in bfloat16", note)
        # bfloat16 prefills stay eager: the plan's float32 residual and attention sums move the logits of a
        # bfloat16 prompt by a few bfloat16 ulps from the eager extend's (measured: a near-tie on the test
        # prompt flipped); in float32 the two agree to rounding (tests/integration/test_fused_decode.py)
        return cls(runner.model, plan, extend, lora, kernels.argmax_rows)

    def takes_adapters(self) -> bool:
        """Whether forwards with LoRA adapter rows run through the plan (else they run the eager model)."""
        return self.lora

    def run(self, fb: Any, lora: tuple[Any, Any] | None = None) -> Any:
        """Logits ``[B, vocab]`` of one DECODE forward; writes the new K/V like the eager step.
        ``lora``: ``(row slots, module mask)`` of a forward with adapter rows (``LoRAManager.plan_rows``)."""
        if lora is not None:
            self.adapter_forwards += 1
        return self.model.forward_decode_plan(self.plan, fb, lora)

    def takes_extend(self, fb: Any) -> bool:
        """Whether the EXTEND forward ``fb`` runs through the plan (:meth:`run_extend`): short ones of a float32 model."""
        return self.extend and len(fb.input_ids) * max(p + n for p, n in zip(fb.prefix_lens, fb.extend_lens)) <= EXTEND_INDEX_LIMIT

    def run_extend(self, fb: Any, lora: tuple[Any, Any] | None = None) -> Any:
        """Logits of an EXTEND forward (prefill, or a chunk of one) through the same plan.

        Each new token is one row of the plan, attending to its request's slots up to
        and including its own: the plan writes every row's K/V before any row attends,
        so the rows of one request see each other causally, as the eager extend does.
        """
        import torch

        rows, lens = [], []
        width = max(p + n for p, n in zip(fb.prefix_lens, fb.extend_lens))
        for slots, p, n in zip(fb.kv_slots, fb.prefix_lens, fb.extend_lens):
            padded = torch.nn.functional.pad(slots, (0, width - len(slots)))
            rows.append(padded.expand(n, width))
            lens.append(torch.arange(p + 1, p + n + 1))
        kv_index = torch.cat(rows).contiguous()
        view = dataclasses.replace(fb, kv_index=kv_index, kv_lens=torch.cat(lens))
        return self.run(view, lora)


def attach_lora(plan: Any, manager: Any) -> tuple[bool, str]:
    """Give ``plan`` the LoRA slot pool's buffers (held, not copied: adapters loaded later are seen).
    ``(whether the plan carries the adapter products, the start-up log's note)``."""
    if manager is None:
        return False, ""
    from sglang.srt.lora.backend import TorchNativeLoRABackend

    if type(manager.backend) is not TorchNativeLoRABackend:
        return False, f"; forwards with LoRA adapter rows run eagerly (--lora-backend {manager.backend.name} computes their products)"
    for i, bufs in enumerate(manager.pool.buffers):
        for fused, (a, bt) in bufs.items():
            plan.set_lora(i, LORA_LINEARS[fused], a, bt)
    return True, "; LoRA adapter products in the plan"
