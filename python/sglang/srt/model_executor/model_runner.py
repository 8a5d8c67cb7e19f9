"""``ModelRunner``: owns the model, the KV pool and every host-to-device copy.

Per-runner values (attention backend, KV dtype, context length) are
attributes here, read from this runner's own ``server_args``; process-wide
configuration is read from the config bags.
"""

from __future__ import annotations

import array
import itertools
import logging
import time
from typing import TYPE_CHECKING

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode, ModelWorkerBatch
from sglang.srt.runtime_context import get_flags, get_lora

if TYPE_CHECKING:
    from sglang.srt.mem_cache.allocator import BasePagedAllocator
    from sglang.srt.server_args import ServerArgs

logger = logging.getLogger(__name__)

# Without --max-total-tokens, a CPU's KV cache gets --mem-fraction-static of the available memory, at
# most this much, and at least one full context: peak RSS then does not grow with the machine's free
# memory. --max-total-tokens sizes it explicitly (up to 90% of what is available).
CPU_KV_CACHE_CAP_BYTES = 256 * 2**20

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def cpu_has_bf16() -> bool:
    from sglang.host import cpu_flags

    return bool(cpu_flags() & {"avx512_bf16", "amx_bf16"})


def resolve_dtype(name: str, device_type: str) -> torch.dtype:
    """``auto``: float32 on CPUs, bfloat16 on accelerators.

    bfloat16 is the fast path on CPUs with AVX-512 BF16 (about 2x the decode
    speed here) but on small models its greedy output drifts from the float32
    reference, so a CPU gets it only when asked (``--dtype bfloat16``).
    """
    if name != "auto":
        if name == "bfloat16" and device_type == "cpu" and not cpu_has_bf16():
            logger.warning("--dtype bfloat16 on a CPU without AVX-512 BF16 is emulated and slow; float32 is faster here")
        return _DTYPES[name]
    return torch.float32 if device_type == "cpu" else torch.bfloat16


class ModelRunner:
    """One model's weights, KV pool and forward. A speculative draft model gets a second runner in the same
    process: its per-runner values (model, context length, load format, attention backend) are constructor
    arguments that live on the runner, because target and draft coexist and the process-wide bags describe
    the target; ``allocator`` (the target's) makes the draft's KV pool share its slot index space."""

    def __init__(self, server_args: ServerArgs, gpu_id: int, tp_rank: int, tp_size: int, dist_init: str, *,
                 is_draft_worker: bool = False, model_path: str | None = None, context_length: int | None = None,
                 load_format: str | None = None, attention_backend: str | None = None, allocator: BasePagedAllocator | None = None) -> None:
        from sglang.srt.distributed import init_distributed_environment, initialize_model_parallel
        from sglang.srt.layers.attention import create_attention_backend
        from sglang.srt.model_loader import read_weights
        from sglang.srt.models.registry import get_model_class
        from sglang.srt.platforms import current_platform, init_platform_backend
        from sglang.srt.runtime_context import get_device, get_exec, get_flags

        init_platform_backend()  # once per worker process, before anything is built on the device
        self.server_args = server_args
        self.is_draft_worker = is_draft_worker
        self.model_path = model_path or server_args.model_path
        self.load_format = load_format or "auto"
        self.platform = current_platform
        self.tp_rank, self.tp_size = tp_rank, tp_size
        self.device = current_platform.get_device(gpu_id)
        current_platform.set_device(self.device)
        # a capability, not a platform name: declared, or answered by the platform's device mixin
        self.pin_memory = current_platform.capabilities.supports_pin_memory or current_platform.is_pin_memory_available(self.device)
        # host tensors are the device's own: build_forward_batch skips the per-tensor .to() (a no-op, at a dispatcher call)
        self._host_is_device = torch.device(self.device).type == "cpu" and not self.pin_memory
        init_distributed_environment(current_platform.get_torch_distributed_backend_str(), tp_size, tp_rank, dist_init)
        initialize_model_parallel(tp_size)
        self.dtype = resolve_dtype(server_args.dtype, get_device().device)
        from sglang.srt.layers.quantization import resolve_quantization

        self.quantization = resolve_quantization(get_exec().quantization, self.model_path, str(self.dtype).replace("torch.", ""),
                                                 current_platform)
        current_platform.verify_quantization(self.quantization)
        self.quant_config = current_platform.get_quantization_config(self.quantization)

        from sglang.srt.layers.q4_packed import PackedQ4Config
        from sglang.srt.model_executor.weight_format import WeightFormatPass

        packed_q4 = isinstance(self.quant_config, PackedQ4Config)
        if packed_q4 and self.dtype not in (torch.bfloat16, torch.float32):
            raise ValueError(f"--quantization gguf_q4 has kernels for bfloat16 and float32 models, not {self.dtype}: "
                             "add --dtype bfloat16 or --dtype float32")
        t0 = time.perf_counter()
        weights = read_weights(self.model_path, keep_q4=packed_q4, load_format=self.load_format)
        self.model_config = weights.config
        self.tokenizer_info = weights.tokenizer_info  # the GGUF's tokenizer, so the scheduler does not read the file again
        cls = get_model_class(weights.config.architecture, str(weights.path))
        if not hasattr(cls, "packed_modules_mapping"):  # a plugin's model may treat the tensors as tensors
            weights.materialize()
        with torch.device(self.device):
            self.model = cls(weights.config, (tp_size, tp_rank), self.dtype)
        # the one place that decides each linear layer's kernel, around loading (see weight_format)
        wf = WeightFormatPass(self.model, weights.packed_q4, weights.embed_q8, self.quantization, self.quant_config, self.dtype, self.device)
        wf.before_load()
        self.model.load_weights(weights.tensors, str(weights.path))
        self.weight_format = wf.after_load()
        self.model.eval()
        del weights
        logger.info("loaded %s%s (%s, %s) in %.1fs", "draft model " if is_draft_worker else "", self.model_path, self.model_config.architecture,
                    self.dtype, time.perf_counter() - t0)

        self.context_length = context_length or server_args.context_length or self.model_config.max_position_embeddings
        # auto: the model dtype, or what the GGUF kernels' arithmetic chose (bfloat16 K/V under int8 activations:
        # cpu_kernels/isa.py auto_kv_dtype)
        auto = _DTYPES[self.weight_format.auto_kv_dtype] if self.weight_format.auto_kv_dtype else self.dtype
        self.kv_cache_dtype = auto if server_args.kv_cache_dtype == "auto" else _DTYPES[server_args.kv_cache_dtype]
        if allocator is None:
            self._init_memory_pool()
        else:
            self._share_slot_space(allocator)
        self.attention_backend = attention_backend or server_args.attention_backend or current_platform.get_default_attention_backend()
        try:
            self.attn = create_attention_backend(self.attention_backend, self)
        except ValueError as exc:
            if not is_draft_worker:
                raise
            raise ValueError(f"{exc} -- for the draft model: --speculative-draft-attention-backend") from None
        capture = current_platform.support_cuda_graph() and not get_exec().graph.disable_cuda_graph
        get_flags().capture.enabled = capture
        self._compiled = None
        self.compile_max_bs = get_exec().compile.torch_compile_max_bs
        if get_exec().compile.enable_torch_compile:
            self._compiled = torch.compile(self._run_model, backend=current_platform.get_compile_backend(), dynamic=True)
        self.graph_runner = current_platform.get_graph_runner_cls()(self._decode_step, get_exec().graph.cuda_graph_max_bs or 160)
        self.lora_manager = None
        if get_lora().enable_lora and not is_draft_worker:  # before the fused plan, which holds the adapter pool's buffers
            from sglang.srt.lora.manager import LoRAManager

            self.lora_manager = LoRAManager(self.model, get_lora(), self.dtype, self.device)
        from sglang.srt.model_executor.fused_decode import FusedDecode

        self.fused_decode = FusedDecode.create(self, get_exec().graph.fused_decode)
        from sglang.srt.model_executor.hook_watch import HookWatch

        self.hook_watch = HookWatch(self, get_exec().graph.fused_decode, self.weight_format.dense_dropped)

    def _init_memory_pool(self) -> None:
        from sglang.srt.arg_groups.overrides import declare_load_time_override
        from sglang.srt.runtime_context import get_memory, get_schedule

        mem = get_memory()
        cfg = self.model_config
        page = mem.page_size
        per_token = cfg.kv_bytes_per_token(self.kv_cache_dtype.itemsize) // self.tp_size
        free, _ = self.platform.get_available_memory(self.device.index or 0)
        total = self.platform.get_device_total_memory(self.device.index or 0)
        budget = int(free * mem.mem_fraction_static)
        if self.device.type == "cpu":  # host memory: the cache must not grow with the machine's free memory
            budget = min(budget, CPU_KV_CACHE_CAP_BYTES)
        budget_tokens = budget // per_token
        ceiling = int(free * 0.9) // per_token
        if mem.max_total_tokens:
            tokens = max(min(mem.max_total_tokens, ceiling), page)
        else:  # bounded: at least one full context, at most 90% of what is free
            tokens = max(min(budget_tokens, ceiling), min(self.context_length, ceiling), page)
        tokens -= tokens % page
        self.max_total_tokens = tokens
        logger.info(
            "KV cache: %d tokens (%d pages of %d), %.1f MiB, %s; available memory %.1f of %.1f GiB",
            tokens, tokens // page, page, tokens * per_token / 2**20, self.kv_cache_dtype, free / 2**30, total / 2**30,
        )
        self.kv_pool = self.platform.get_mha_kv_pool_cls()(
            tokens, page, self.kv_cache_dtype, cfg.num_key_value_heads // self.tp_size, cfg.head_dim, cfg.num_hidden_layers, str(self.device)
        )
        self.allocator = self.platform.get_paged_allocator_cls()(tokens, page)
        self.memory_usage_after_init = self.platform.get_current_memory_usage(self.device)
        logger.info("peak memory after model and KV cache: %.1f MiB", self.memory_usage_after_init / 2**20)
        if get_schedule().max_running_requests is None:
            declare_load_time_override("model runner (KV capacity)", {"max_running_requests": max(1, min(256, tokens // 64))})

    def _share_slot_space(self, allocator: BasePagedAllocator) -> None:
        """A draft runner: a KV pool of its own over the target allocator's slots (a page id means the same
        slots in both pools, so one allocation, one radix-cache entry and one free cover both)."""
        cfg = self.model_config
        self.max_total_tokens = allocator.size
        self.kv_pool = self.platform.get_mha_kv_pool_cls()(
            allocator.size, allocator.page_size, self.kv_cache_dtype, cfg.num_key_value_heads // self.tp_size, cfg.head_dim,
            cfg.num_hidden_layers, str(self.device)
        )
        self.allocator = allocator
        self.memory_usage_after_init = self.platform.get_current_memory_usage(self.device)
        logger.info("draft KV cache: %d tokens in the target's slot space, %.1f MiB, %s", allocator.size, self.kv_pool.nbytes() / 2**20,
                    self.kv_cache_dtype)

    # -- the hot path ----------------------------------------------------------
    def _h2d(self, t: torch.Tensor) -> torch.Tensor:
        """One host tensor to the device, through pinned memory where the platform offers it."""
        if self.pin_memory:
            return t.pin_memory().to(self.device, non_blocking=True)
        return t.to(self.device)

    def build_forward_batch(self, b: ModelWorkerBatch) -> ForwardBatch:
        """Host lists -> device tensors (the only host-to-device copy of a step)."""
        # Few torch ops, the index arithmetic in Python: right after a step has streamed the weights every small
        # op runs from cold caches (about 20 us each against 2), and a decode step at one row lasts 4-6 ms.
        ps = self.kv_pool.page_size
        h2d = self._h2d
        flat = [t for toks in b.new_tokens for t in toks]
        lens = [len(t) for t in b.new_tokens]
        if b.mode is ForwardMode.DECODE:
            return self._decode_forward_batch(b, flat, lens)
        input_ids = torch.tensor(flat, dtype=torch.long)
        logits_idx = torch.tensor(list(itertools.accumulate(lens)), dtype=torch.long) - 1
        if any(b.input_logprob_rows):  # prompt log-probabilities: more rows after the B sampling rows
            starts = logits_idx - torch.tensor(lens) + 1
            extra = [torch.arange(int(starts[i]) + lo, int(starts[i]) + hi) for i, span in enumerate(b.input_logprob_rows) if span for lo, hi in [span]]
            logits_idx = torch.cat([logits_idx, *extra])
        if b.mode is ForwardMode.TARGET_VERIFY:  # speculative verify: an extend whose every row gives logits
            logits_idx = torch.arange(len(flat))
        ar = torch.arange(ps)
        kv_slots, pos, out = [], [], []
        for prefix, n, pg in zip(b.prefix_lens, lens, b.pages):
            if ps == 1:  # a page id is its token's slot: one conversion (a verify step runs this for every request)
                s = torch.tensor(pg[: prefix + n], dtype=torch.long)
            else:
                s = (torch.tensor(pg, dtype=torch.long)[:, None] * ps + ar).reshape(-1)[: prefix + n]
            kv_slots.append(h2d(s))
            out.extend(s[prefix:].tolist())
            pos.extend(range(prefix, prefix + n))
        return ForwardBatch(ForwardMode.EXTEND, h2d(input_ids), h2d(torch.tensor(pos, dtype=torch.long)),
                            h2d(torch.tensor(out, dtype=torch.long)), b.prefix_lens, lens, h2d(logits_idx), kv_slots=kv_slots)

    def _decode_forward_batch(self, b: ModelWorkerBatch, flat: list[int], lens: list[int]) -> ForwardBatch:
        """``build_forward_batch`` of a DECODE step (one new token a request): every index in one host tensor, split
        into views. Right after a step has streamed the weights each torch call runs from cold caches: against the
        seven calls this replaced, 155 -> 133 us at one request of 280 tokens, 362 -> 244 at 16 of 150 (Zen 4 EPYC)."""
        ps, n = self.kv_pool.page_size, len(b.pages)
        assert len(flat) == n  # the scheduler's invariant: a decode row is one new token
        width = max(k // ps for k in b.prefix_lens) + 1  # pages up to the new token's (a request may hold more ahead)
        padded = [x for p in b.pages for x in (p[:width] if len(p) >= width else p + [0] * (width - len(p)))]
        out_loc = [p[k // ps] * ps + k % ps for p, k in zip(b.pages, b.prefix_lens)]
        # through an int64 array: torch.tensor converts a list element by element (18 us for 289 warm, 5 this way)
        host = torch.frombuffer(array.array("q", [*flat, *b.prefix_lens, *[k + 1 for k in b.prefix_lens], *out_loc, *range(n), *padded]),
                                dtype=torch.int64)
        input_ids, positions, kv_lens, out, logits_idx, pages = host.split([n, n, n, n, n, n * width])
        pages = pages.view(n, width)
        # pages of 1 (the default): a page id is its token's slot
        slots = pages if ps == 1 else (pages[:, :, None] * ps + torch.arange(ps)).reshape(n, width * ps)
        if not self._host_is_device:
            input_ids, positions, out, logits_idx, slots, kv_lens = map(self._h2d, (input_ids, positions, out, logits_idx, slots, kv_lens))
        return ForwardBatch(ForwardMode.DECODE, input_ids, positions, out, b.prefix_lens, lens, logits_idx, kv_index=slots, kv_lens=kv_lens)

    def _run_model(self, fb: ForwardBatch) -> torch.Tensor:
        self.attn.init_forward_metadata(fb)
        return self.model(fb.input_ids, fb.positions, fb, self.attn)

    def _decode_step(self, fb: ForwardBatch) -> torch.Tensor:
        """The decode step: fused on CPU (``--fused-decode``), or compiled (``--enable-torch-compile``)
        up to ``--torch-compile-max-bs``, or eager."""
        if self.fused_decode is not None:
            return self.fused_decode.run(fb)
        if self._compiled is not None and fb.batch_size <= self.compile_max_bs:
            return self._compiled(fb)
        return self._run_model(fb)

    def forward(self, b: ModelWorkerBatch) -> torch.Tensor:
        """Logits ``[B, vocab]`` of each request's last new token (TARGET_VERIFY: of every new token), then (EXTEND with
        ``input_logprob_rows``) one row per wanted prompt position, in request order."""
        self.hook_watch.check()  # hooks applied or restored since the last step: honoured, or reported once
        fb = self.build_forward_batch(b)
        if self.lora_manager is not None and any(i is not None for i in b.lora_ids):
            return self._forward_with_adapters(b, fb)
        with self.platform.inference_mode():
            # replay through the platform's graph runner only where capture is enabled
            if fb.mode is ForwardMode.DECODE and get_flags().capture.enabled and self.graph_runner.can_run(fb.batch_size):
                return self.graph_runner.run(fb)
            if fb.mode is ForwardMode.DECODE:
                return self._decode_step(fb)
            if self.fused_decode is not None and self.fused_decode.takes_extend(fb):
                return self.fused_decode.run_extend(fb)
            return self._run_model(fb)

    def _forward_with_adapters(self, b: ModelWorkerBatch, fb: ForwardBatch) -> torch.Tensor:
        """A forward with adapter rows: through the fused plan where it carries the adapter products (decode,
        and the prefills it takes), else the eager model, whose linear layers add them; a captured graph and
        the compiled step stand aside (they have no adapter products)."""
        assert self.lora_manager is not None
        self.lora_manager.prepare(b.lora_ids, fb.extend_lens)
        try:
            with self.platform.inference_mode():
                fused = self.fused_decode
                if fused is not None and fused.takes_adapters():
                    if fb.mode is ForwardMode.DECODE:
                        return fused.run(fb, self.lora_manager.plan_rows())
                    if fb.mode is ForwardMode.EXTEND and fused.takes_extend(fb):
                        return fused.run_extend(fb, self.lora_manager.plan_rows())
                return self._run_model(fb)
        finally:
            self.lora_manager.finish()
