"""PEFT adapter configuration: ``adapter_config.json`` read and checked, target modules normalised.

This project fuses q/k/v into ``qkv_proj`` and gate/up into ``gate_up_proj`` (``LlamaForCausalLM.
packed_modules_mapping``); an adapter names the unfused modules, as PEFT does, and the pool stacks them.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass

from sglang.srt.lora.errors import LoRAConfigError

# the modules an adapter may target, as PEFT names them
SUPPORTED_LORA_TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
FUSED_ALIASES = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}
# this project's fused layers -> the PEFT modules each stacks, in output order
FUSED_LAYERS = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "o_proj": ("o_proj",),
                "gate_up_proj": ("gate_proj", "up_proj"), "down_proj": ("down_proj",)}
CONFIG_FILE = "adapter_config.json"


def normalize_target_modules(names: list[str] | set[str] | tuple[str, ...], where: str) -> frozenset[str]:
    """PEFT module names (``all``/``all-linear``, the fused aliases expanded); LoRAConfigError names ``where`` and the choices."""
    names = list(names)
    if "all" in names or "all-linear" in names:
        if len(names) > 1 and "all" in names:
            raise LoRAConfigError(f"{where}: 'all' must appear alone, got {names}")
        return frozenset(SUPPORTED_LORA_TARGET_MODULES)
    out: set[str] = set()
    for n in names:
        short = n.rsplit(".", 1)[-1]  # PEFT also takes "model.layers.0.self_attn.q_proj"-style suffixes
        if short in FUSED_ALIASES:
            out.update(FUSED_ALIASES[short])
        elif short in SUPPORTED_LORA_TARGET_MODULES:
            out.add(short)
        else:
            raise LoRAConfigError(f"{where}: target module {n!r} is not supported; supported: "
                                  f"{', '.join(SUPPORTED_LORA_TARGET_MODULES + tuple(FUSED_ALIASES))}, or all")
    return frozenset(out)


@dataclass(frozen=True)
class LoRAConfig:
    """What the pool needs of an adapter: rank, scaling (alpha/r, or alpha/sqrt(r) with rsLoRA), target modules."""

    path: str
    r: int
    lora_alpha: float
    use_rslora: bool
    target_modules: frozenset[str]

    @property
    def scaling(self) -> float:
        return self.lora_alpha / (math.sqrt(self.r) if self.use_rslora else self.r)

    @classmethod
    def from_dir(cls, path: str) -> LoRAConfig:
        """Read ``path/adapter_config.json``; LoRAConfigError names the file, the key and the fix."""
        file = os.path.join(path, CONFIG_FILE)
        if not os.path.isfile(file):
            raise LoRAConfigError(f"{file}: not found; a LoRA adapter is a directory with {CONFIG_FILE} and adapter_model.safetensors "
                                  "(what PEFT's save_pretrained writes)")
        try:
            with open(file, encoding="utf-8") as fh:
                cfg = json.loads(fh.read())
        except (OSError, ValueError) as exc:
            raise LoRAConfigError(f"{file}: not readable JSON ({exc})") from None
        if not isinstance(cfg, dict):
            raise LoRAConfigError(f"{file}: expected a JSON object")

        def bad(key: str, why: str) -> LoRAConfigError:
            return LoRAConfigError(f"{file}: key {key!r} {why}")

        r = cfg.get("r")
        if not isinstance(r, int) or isinstance(r, bool) or r < 1:
            raise bad("r", f"must be a positive integer rank, got {r!r}")
        alpha = cfg.get("lora_alpha", r)
        if not isinstance(alpha, (int, float)) or isinstance(alpha, bool):
            raise bad("lora_alpha", f"must be a number, got {alpha!r}")
        if cfg.get("peft_type", "LORA") != "LORA":
            raise bad("peft_type", f"is {cfg.get('peft_type')!r}; only LORA adapters are served")
        for key, why in (("use_dora", "DoRA adapters are not supported; merge the adapter or retrain without use_dora"),
                         ("fan_in_fan_out", "transposed (Conv1D-style) weights are not supported for this model")):
            if cfg.get(key):
                raise bad(key, f"is set: {why}")
        for key in ("rank_pattern", "alpha_pattern"):
            if cfg.get(key):
                raise bad(key, "is not empty: per-module ranks and alphas are not supported; retrain with one r and lora_alpha")
        if cfg.get("modules_to_save"):
            raise bad("modules_to_save", f"lists {cfg['modules_to_save']}: full copies of modules are not supported, only low-rank ones")
        if cfg.get("bias", "none") != "none":
            raise bad("bias", f"is {cfg['bias']!r}: adapters that train biases are not supported (bias: none)")
        targets = cfg.get("target_modules")
        if isinstance(targets, str):
            if targets != "all-linear":
                raise bad("target_modules", f"is the pattern {targets!r}; list the module names instead (e.g. [\"q_proj\", \"v_proj\"])")
            targets = [targets]
        if not isinstance(targets, list) or not targets:
            raise bad("target_modules", f"must be a non-empty list of module names, got {targets!r}")
        return cls(path, r, float(alpha), bool(cfg.get("use_rslora", False)), normalize_target_modules(targets, f"{file}: key 'target_modules'"))
