"""GGUF: config, dequantized weights (HF naming) and the tokenizer, from one file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.model_loader.errors import ModelLoadError
from sglang.srt.model_loader.progress import progress

ARCHS = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}
SUPPORTED_TYPES = {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q6_K"}

_LAYER = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_TOP = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight", "output.weight": "lm_head.weight"}


def _hf_name(name: str) -> str | None:
    if name in _TOP:
        return _TOP[name]
    if name.startswith("blk."):
        _, idx, rest = name.split(".", 2)
        if rest in _LAYER:
            return f"model.layers.{idx}.{_LAYER[rest]}"
    return None


def _unpermute(w: Any, n_head: int) -> Any:
    """Undo llama.cpp's rotary row permutation of q/k so rotate-half rope applies."""
    out = w.shape[0]
    return w.reshape(n_head, out // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _field(reader: Any, key: str, default: Any = None) -> Any:
    v = reader.fields.get(key)
    return default if v is None else v


def _open(path: Path) -> Any:
    """The parsed file (``gguf_file.GGUFFile``), once per process."""
    from sglang.srt.model_loader.gguf_file import read_gguf_file

    try:
        return read_gguf_file(path)
    except Exception as exc:
        raise ModelLoadError(f"{path} is not a readable GGUF file: {exc}") from exc


def _config(reader: Any, path: Path) -> ModelConfig:
    arch = _field(reader, "general.architecture")
    if arch not in ARCHS:
        raise ModelLoadError(f"{path}: architecture {arch!r} is not supported; supported GGUF architectures: {sorted(ARCHS)}")
    p = f"{arch}."
    heads = int(_field(reader, p + "attention.head_count"))
    hidden = int(_field(reader, p + "embedding_length"))
    names = {t.name for t in reader.tensors}
    tokens = _field(reader, "tokenizer.ggml.tokens")
    return ModelConfig(
        architecture=ARCHS[arch],
        hidden_size=hidden,
        num_hidden_layers=int(_field(reader, p + "block_count")),
        num_attention_heads=heads,
        num_key_value_heads=int(_field(reader, p + "attention.head_count_kv", heads)),
        head_dim=int(_field(reader, p + "rope.dimension_count", hidden // heads)),
        intermediate_size=int(_field(reader, p + "feed_forward_length")),
        vocab_size=int(_field(reader, p + "vocab_size", len(tokens) if tokens else 0)),
        rope_theta=float(_field(reader, p + "rope.freq_base", 10000.0)),
        rms_norm_eps=float(_field(reader, p + "attention.layer_norm_rms_epsilon", 1e-6)),
        max_position_embeddings=int(_field(reader, p + "context_length", 2048)),
        tie_word_embeddings="output.weight" not in names,
        attention_bias="blk.0.attn_q.bias" in names,
    )


def _permuted_heads(arch: str, name: str, cfg: ModelConfig) -> int:
    """llama.cpp stores a Llama's q/k rows permuted for its rotary layout: the head count to undo it (0: none)."""
    if arch != "llama":
        return 0
    if name.endswith(("attn_q.weight", "attn_q.bias")):
        return cfg.num_attention_heads
    if name.endswith(("attn_k.weight", "attn_k.bias")):
        return cfg.num_key_value_heads
    return 0


class _LazyDense:
    """A GGUF tensor dequantized to float32 on ``.to(dtype)``; the loader's tensors support only that call."""

    def __init__(self, t: Any, heads: int) -> None:
        self.t, self.heads = t, heads

    def to(self, dtype: Any) -> Any:
        import numpy as np
        import torch
        from gguf.quants import dequantize

        arr = np.asarray(dequantize(self.t.data, self.t.tensor_type), dtype=np.float32)
        if self.heads:
            arr = _unpermute(arr, self.heads)
        arr = np.ascontiguousarray(arr)
        return torch.from_numpy(arr if arr.flags.writeable else arr.copy()).to(dtype)


def read_gguf(path: Path, keep_q4: bool = False) -> tuple[ModelConfig, dict[str, Any], dict[str, Any], dict[str, Any], Any]:
    """``(config, {hf_name: torch tensor (float32)}, tokenizer info, packed Q4 blocks, embedding Q8_0 blocks)``.

    With ``keep_q4`` the tensors are dequantized lazily: each supports ``.to(dtype)`` only, which
    ``load_weights`` calls once per tensor.

    With ``keep_q4`` the Q4_0/Q4_1 weights are also returned as raw blocks
    ``{hf_name: (q, scale, mn)}`` (rows un-permuted like the dense copy). A
    Q8_0 token embedding is always returned as ``(q int8 [V, H], scale
    float32 [V, H/32])``, else None (``q8_blocks``).
    """
    import numpy as np
    import torch

    from sglang.srt.layers.q4_packed import q4_blocks, q8_blocks

    reader = _open(path)
    cfg = _config(reader, path)
    arch = _field(reader, "general.architecture")
    tensors: dict[str, Any] = {}
    packed: dict[str, Any] = {}
    embed_q8 = None
    for t in progress(reader.tensors, desc=f"Loading {path.name}"):
        hf = _hf_name(t.name)
        if hf is None:
            continue
        kind = t.tensor_type.name
        if kind not in SUPPORTED_TYPES:
            raise ModelLoadError(f"{path}: tensor {t.name!r} has type {kind}; supported: {sorted(SUPPORTED_TYPES)}")
        heads = _permuted_heads(arch, t.name, cfg)
        n_cols = int(t.shape[0]) if len(t.shape) > 1 else 0  # GGUF lists dimensions innermost first
        if keep_q4 and kind in ("Q4_0", "Q4_1") and hf.endswith(".weight"):
            blocks = q4_blocks(np.asarray(t.data), kind, n_cols)
            if heads:
                blocks = tuple(_unpermute(b.numpy(), heads) for b in blocks)
            packed[hf] = tuple(torch.as_tensor(np.ascontiguousarray(b)) for b in blocks)
        if hf == "model.embed_tokens.weight" and kind == "Q8_0":
            embed_q8 = q8_blocks(np.asarray(t.data), n_cols)
        # with keep_q4 the dense copy is made when the model asks for it (``.to``), one tensor at a time; a layer
        # whose kernel holds the blocks drops it at once (its dense weight is never filled)
        tensors[hf] = _LazyDense(t, heads) if keep_q4 else _LazyDense(t, heads).to(torch.float32)
    return cfg, tensors, _tokenizer_info(reader), packed, embed_q8


def read_gguf_tokenizer(path: Path) -> dict[str, Any]:
    return _tokenizer_info(_open(path))


def _tokenizer_info(reader: Any) -> dict[str, Any]:
    return {
        "model": _field(reader, "tokenizer.ggml.model"),
        "pre": _field(reader, "tokenizer.ggml.pre"),
        "tokens": _field(reader, "tokenizer.ggml.tokens"),
        "merges": _field(reader, "tokenizer.ggml.merges") or [],
        "token_type": _field(reader, "tokenizer.ggml.token_type") or [],
        "bos_token_id": _field(reader, "tokenizer.ggml.bos_token_id"),
        "eos_token_id": _field(reader, "tokenizer.ggml.eos_token_id"),
        "add_bos_token": bool(_field(reader, "tokenizer.ggml.add_bos_token", False)),
        "chat_template": _field(reader, "tokenizer.chat_template"),
        "generation": _generation_info(reader),
    }


def _generation_info(reader: Any) -> dict[str, Any]:
    """The model's identity (``general.organization/general.name``) and its ``general.sampling.*`` values."""
    from sglang.srt.configs.generation_config import GGUF_SAMPLING_KEYS

    org, name = _field(reader, "general.organization"), _field(reader, "general.name")
    sampling = {ours: v for key, ours in GGUF_SAMPLING_KEYS.items() if (v := _field(reader, key)) is not None}
    return {"identity": f"{org}/{name}" if org and name else name, "sampling": sampling}
