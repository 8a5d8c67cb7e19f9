"""Llama-family decoder in plain torch: RMSNorm, rotary, GQA attention, SwiGLU.

Qwen2 (q/k/v biases) and Mistral (Llama layout) are the same module.
Tensor parallel: q/k/v and gate/up are column-parallel, o and down are
row-parallel, the embedding and LM head are vocab-parallel.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.layers.basic import RMSNorm, RotaryEmbedding, silu_and_mul
from sglang.srt.layers.linear_kernels import Dense
from sglang.srt.layers.parallel import ColumnParallelLinear, ParallelLMHead, RowParallelLinear, VocabParallelEmbedding
from sglang.srt.model_loader.errors import ModelLoadError


class LlamaAttention(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_id: int, tp: tuple[int, int], dtype: torch.dtype) -> None:
        super().__init__()
        tp_size, tp_rank = tp
        if cfg.num_attention_heads % tp_size or cfg.num_key_value_heads % tp_size:
            raise ValueError(
                f"--tp-size {tp_size} must divide the {cfg.num_attention_heads} attention heads and "
                f"{cfg.num_key_value_heads} KV heads of this model"
            )
        self.layer_id = layer_id
        self.heads, self.kv_heads, self.head_dim = cfg.num_attention_heads // tp_size, cfg.num_key_value_heads // tp_size, cfg.head_dim
        q, kv = cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim
        self.qkv_proj = ColumnParallelLinear(cfg.hidden_size, [q, kv, kv], cfg.attention_bias, tp_size, tp_rank, dtype)
        self.o_proj = RowParallelLinear(q, cfg.hidden_size, tp_size, tp_rank, dtype)
        self.split = [self.heads * self.head_dim, self.kv_heads * self.head_dim, self.kv_heads * self.head_dim]

    def forward(self, h: torch.Tensor, cos_sin: Any, fb: Any, rotary: RotaryEmbedding, attn: Any) -> torch.Tensor:
        q, k, v = self.qkv_proj.forward(h).split(self.split, dim=-1)
        q = q.view(-1, self.heads, self.head_dim)
        k = k.view(-1, self.kv_heads, self.head_dim)
        q, k = rotary.apply(cos_sin, q, k)
        o = attn.forward(q, k, v.view(-1, self.kv_heads, self.head_dim), self.layer_id, fb)
        return self.o_proj.forward(o)


class LlamaMLP(nn.Module):
    def __init__(self, cfg: ModelConfig, tp: tuple[int, int], dtype: torch.dtype) -> None:
        super().__init__()
        self.gate_up_proj = ColumnParallelLinear(cfg.hidden_size, [cfg.intermediate_size] * 2, False, *tp, dtype)
        self.down_proj = RowParallelLinear(cfg.intermediate_size, cfg.hidden_size, *tp, dtype)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.down_proj.forward(silu_and_mul(self.gate_up_proj.forward(h)))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_id: int, tp: tuple[int, int], dtype: torch.dtype) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype)
        self.self_attn = LlamaAttention(cfg, layer_id, tp, dtype)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype)
        self.mlp = LlamaMLP(cfg, tp, dtype)

    def forward(self, h: torch.Tensor, cos_sin: Any, fb: Any, rotary: RotaryEmbedding, attn: Any) -> torch.Tensor:
        # h: the residual stream, kept in float32; sublayers run in the model dtype.
        # .forward() directly: this loop runs 30x per step, nn.Module.__call__ adds up
        dt = self.input_layernorm.weight.dtype
        h = h + self.self_attn.forward(self.input_layernorm.forward(h).to(dt), cos_sin, fb, rotary, attn)
        return h + self.mlp.forward(self.post_attention_layernorm.forward(h).to(dt))


class LlamaForCausalLM(nn.Module):
    """``forward(input_ids [T], positions [T], fb) -> logits [B, vocab]`` (last token per request)."""

    # fused modules -> the checkpoint tensors they hold, in order (read by the weight-format pass)
    packed_modules_mapping = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}
    checkpoint_prefix = "model."  # module ``layers.0.mlp`` is checkpoint ``model.layers.0.mlp``

    def __init__(self, cfg: ModelConfig, tp: tuple[int, int], dtype: torch.dtype) -> None:
        super().__init__()
        self.config = cfg
        self.embed_tokens = VocabParallelEmbedding(cfg.vocab_size, cfg.hidden_size, *tp, dtype)
        self.layers = nn.ModuleList(LlamaDecoderLayer(cfg, i, tp, dtype) for i in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype)
        self.lm_head = ParallelLMHead(self.embed_tokens, cfg.tie_word_embeddings, cfg.hidden_size, dtype)
        self.rotary = RotaryEmbedding(cfg.head_dim, cfg.max_position_embeddings, cfg.rope_theta, dtype)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, fb: Any, attn: Any) -> torch.Tensor:
        h = self.embed_tokens(input_ids).float()
        cos_sin = self.rotary.lookup(positions)
        for layer in self.layers:
            h = layer.forward(h, cos_sin, fb, self.rotary, attn)
        h = self.norm(h[fb.logits_indices]).to(self.norm.weight.dtype)
        return self.lm_head(h)

    # -- the fused CPU decode step (sglang.srt.model_executor.fused_decode) ---
    def build_decode_plan(self, kernels: Any, kv_pool: Any) -> Any:
        """A ``DecodePlan`` holding every layer's weights and KV buffers (shared, not copied).

        Only for one rank (no all-reduce inside the plan) and a pool whose
        per-layer buffers are ``[slots, kv_heads, head_dim]`` in the model dtype.
        """
        e = self.embed_tokens
        # the step's inputs in one kernel call where they are the float32 rows of a Q8_0 embedding (_plan_inputs)
        exact = type(e) is VocabParallelEmbedding and e.q8 is not None and e.tp_size == 1 and e.weight.dtype == torch.float32
        self._inputs_kernel = kernels.decode_inputs if exact else None
        self.__dict__["_inputs_embedding"] = e if exact else None  # a plain reference: not registered as a submodule
        attn0 = self.layers[0].self_attn
        plan = kernels.DecodePlan(attn0.heads, attn0.kv_heads, attn0.head_dim, self.config.rms_norm_eps)

        def specs(lin: Any) -> list[Any]:  # the layer's own kernel, as the plan's descriptors
            return (lin.kernel or Dense(lin.weight)).specs(kernels)

        for i, layer in enumerate(self.layers):
            a, m = layer.self_attn, layer.mlp
            plan.add_layer(input_norm=layer.input_layernorm.weight, post_norm=layer.post_attention_layernorm.weight,
                           qkv=specs(a.qkv_proj), qkv_bias=a.qkv_proj.bias, o=specs(a.o_proj), gate_up=specs(m.gate_up_proj),
                           down=specs(m.down_proj), k_cache=kv_pool.get_key_buffer(i), v_cache=kv_pool.get_value_buffer(i))
        if type(self.norm) is RMSNorm and type(self.lm_head) is ParallelLMHead and self.norm.weight.dtype == torch.float32:
            # the final norm and the head in the step's own parallel region where their kernels allow (run_logits)
            plan.set_head(self.norm.weight, specs(self.lm_head), self.lm_head.embedding.vocab_size)
        return plan

    _inputs_kernel: Any = None  # the kernels' decode_inputs, set by build_decode_plan where it computes these bits
    _inputs_embedding: Any = None  # the embedding it was set for: one swapped in (or patched) since runs as a module

    def _plan_inputs(self, fb: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(h float32 [T, H], cos, sin [T, D]) of a forward through the plan (decode, short prefill, verify): ``embed_tokens``
        and the rotary tables' rows, by one kernel call unless a torch module hook on the embedding must run, or the
        embedding was replaced or its ``forward`` patched since the plan was built (then the module runs)."""
        e, kernel = self.embed_tokens, self._inputs_kernel
        if (kernel is not None and e is self._inputs_embedding and "forward" not in e.__dict__
                and not (e._forward_hooks or e._forward_pre_hooks or nn.modules.module._global_forward_hooks
                         or nn.modules.module._global_forward_pre_hooks)):
            h, cos, sin = kernel(*e.q8, fb.input_ids, self.rotary.cos, self.rotary.sin, fb.positions)
            return h, cos, sin
        return self.embed_tokens(fb.input_ids).float(), self.rotary.cos[fb.positions], self.rotary.sin[fb.positions]

    def decode_plan_blockers(self) -> list[str]:
        """Why the plan would not compute what ``forward`` computes: a part replaced by a subclass."""
        why = []
        if type(self).forward is not LlamaForCausalLM.forward:
            why.append(f"{type(self).__qualname__} overrides forward()")
        replaced: dict[tuple[type, type], None] = {}  # ordered, one entry per (subclass, base)
        for layer in self.layers:
            a, m = layer.self_attn, layer.mlp
            parts = [(layer, LlamaDecoderLayer), (a, LlamaAttention), (m, LlamaMLP), (layer.input_layernorm, RMSNorm),
                     (layer.post_attention_layernorm, RMSNorm), (a.qkv_proj, ColumnParallelLinear), (a.o_proj, RowParallelLinear),
                     (m.gate_up_proj, ColumnParallelLinear), (m.down_proj, RowParallelLinear), (self.rotary, RotaryEmbedding)]
            replaced.update(((type(obj), cls), None) for obj, cls in parts if type(obj) is not cls)
        why += [f"{got.__qualname__} replaces {cls.__qualname__}" for got, cls in replaced]
        return why

    def forward_decode_plan(self, plan: Any, fb: Any, lora: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """The decode step through ``plan``: same inputs and logits as ``forward`` in DECODE mode.
        ``lora``: ``(row slots, module mask)``, the LoRA adapter of each row (the plan holds the pool)."""
        h, cos, sin = self._plan_inputs(fb)
        if lora is None and plan.fuses_head(h.shape[0], fb.logits_indices.numel()):
            return plan.run_logits(h, cos, sin, fb.kv_index, fb.kv_lens, fb.out_cache_loc, fb.logits_indices)
        slots, mask = lora if lora is not None else (None, None)
        plan.run(h, cos, sin, fb.kv_index, fb.kv_lens, fb.out_cache_loc, lora_slots=slots, lora_mask=mask)
        h = self.norm(h[fb.logits_indices]).to(self.norm.weight.dtype)
        return self.lm_head(h)

    def load_weights(self, tensors: dict[str, torch.Tensor], source: str) -> None:
        """Copy full (unsharded) HF-named tensors in; a missing one names the file and tensor.

        Tensors are popped from ``tensors`` as they are copied, so the host copy
        shrinks while the model fills (peak memory ~ one copy of the weights).
        """
        dtype = self.norm.weight.dtype

        def get(name: str, into: torch.nn.Module | None = None) -> torch.Tensor | None:
            """The tensor as ``dtype``; None (never dequantized: a GGUF's lazy tensors cost seconds) when ``into``'s
            weight was already replaced by a kernel holding the file's blocks."""
            t = tensors.pop(name, None)
            if t is None:
                raise ModelLoadError(f"{source}: tensor {name!r} is missing (expected for {self.config.architecture})")
            return None if into is not None and into.weight.is_meta else t.to(dtype)

        self.embed_tokens.load(get("model.embed_tokens.weight", self.embed_tokens))
        if not self.config.tie_word_embeddings:
            self.lm_head.load(get("lm_head.weight"))
        self.norm.weight.data.copy_(get("model.norm.weight"))
        for i, layer in enumerate(self.layers):
            p = f"model.layers.{i}."
            layer.input_layernorm.weight.data.copy_(get(p + "input_layernorm.weight"))
            layer.post_attention_layernorm.weight.data.copy_(get(p + "post_attention_layernorm.weight"))
            a = p + "self_attn."
            biases = [get(a + f"{x}_proj.bias") for x in "qkv"] if self.config.attention_bias else None
            qkv, o = layer.self_attn.qkv_proj, layer.self_attn.o_proj
            qkv.load([get(a + f"{x}_proj.weight", qkv) for x in "qkv"], biases)
            o.load(get(a + "o_proj.weight", o))
            m = p + "mlp."
            gate_up, down = layer.mlp.gate_up_proj, layer.mlp.down_proj
            gate_up.load([get(m + "gate_proj.weight", gate_up), get(m + "up_proj.weight", gate_up)])
            down.load(get(m + "down_proj.weight", down))


class Qwen2ForCausalLM(LlamaForCausalLM):
    """Qwen2: the Llama layout with q/k/v biases (``ModelConfig.attention_bias``)."""


class MistralForCausalLM(LlamaForCausalLM):
    """Mistral: the Llama layout (sliding windows longer than any context here)."""
