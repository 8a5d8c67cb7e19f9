"""Architecture name -> model class, imported lazily; errors list the supported names."""

from __future__ import annotations

from sglang.plugin_core.discovery import import_qualname

MODELS = {
    "LlamaForCausalLM": "sglang.srt.models.llama:LlamaForCausalLM",
    "Qwen2ForCausalLM": "sglang.srt.models.llama:Qwen2ForCausalLM",
    "MistralForCausalLM": "sglang.srt.models.llama:MistralForCausalLM",
}


def get_model_class(arch: str, source: str) -> type:
    qualname = MODELS.get(arch)
    if qualname is None:
        from sglang.srt.model_loader.errors import ModelLoadError

        raise ModelLoadError(f"{source}: architecture {arch!r} is not supported; supported: {sorted(MODELS)}")
    return import_qualname(qualname)
