"""A PEFT adapter's weights, read and mapped onto this project's modules.

PEFT names a weight ``base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight`` (``[r, in]``) or
``...lora_B.weight`` (``[out, r]``); any prefix before ``layers.N`` is accepted (nested layouts such as
``language_model.model.layers.N``), and PEFT's adapter-name infix (``lora_A.default.weight``) too.
"""

from __future__ import annotations

import os
import re
from typing import Any

from sglang.srt.lora.config import LoRAConfig
from sglang.srt.lora.errors import LoRAConfigError

WEIGHT_FILES = ("adapter_model.safetensors", "adapter_model.bin")
_KEY = re.compile(r"(?:^|\.)layers\.(\d+)\.(?:self_attn|mlp)\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)"
                  r"\.lora_(A|B)(?:\.[A-Za-z0-9_-]+)?\.weight$")


def read_tensors(path: str) -> tuple[str, dict[str, Any]]:
    """``(file, {key: tensor})`` of the adapter's weight file."""
    import torch

    for name in WEIGHT_FILES:
        file = os.path.join(path, name)
        if os.path.isfile(file):
            try:
                if name.endswith(".safetensors"):
                    from safetensors.torch import load_file

                    return file, load_file(file, device="cpu")
                return file, torch.load(file, map_location="cpu", weights_only=True)
            except Exception as exc:  # a truncated or foreign file: name it
                raise LoRAConfigError(f"{file}: not a readable weight file ({exc}); save the adapter again with PEFT's save_pretrained") from None
    raise LoRAConfigError(f"{path}: no {' or '.join(WEIGHT_FILES)}; save the adapter with PEFT's save_pretrained")


class LoRAAdapter:
    """Host copies of one adapter: ``weights[(layer, module)] = (A [r, in], B [out, r] * scaling)``."""

    def __init__(self, config: LoRAConfig, weights: dict[tuple[int, str], tuple[Any, Any]]) -> None:
        self.config = config
        self.weights = weights

    @property
    def modules(self) -> set[str]:
        return {m for _, m in self.weights}

    @classmethod
    def load(cls, path: str, dims: dict[str, tuple[int, int]], num_layers: int, dtype: Any) -> LoRAAdapter:
        """Read and check against the model: ``dims[module] = (in, out)``. LoRAConfigError names the file, key and fix."""
        config = LoRAConfig.from_dir(path)
        file, tensors = read_tensors(path)
        halves: dict[tuple[int, str], dict[str, Any]] = {}
        for key, t in tensors.items():
            m = _KEY.search(key)
            if m is None:
                raise LoRAConfigError(f"{file}: key {key!r} is not a LoRA weight of a q/k/v/o/gate/up/down projection of a decoder layer; "
                                      "only those are served (drop the tensor, or retrain without it)")
            layer, module, half = int(m.group(1)), m.group(2), m.group(3)
            if layer >= num_layers:
                raise LoRAConfigError(f"{file}: key {key!r} names layer {layer}, but the model has {num_layers}; "
                                      "this adapter was trained for another model")
            if module not in config.target_modules:
                raise LoRAConfigError(f"{file}: key {key!r} targets {module}, which adapter_config.json's target_modules "
                                      f"{sorted(config.target_modules)} leaves out; add it there")
            halves.setdefault((layer, module), {})[half] = (key, t)
        weights: dict[tuple[int, str], tuple[Any, Any]] = {}
        for (layer, module), h in sorted(halves.items()):
            if set(h) != {"A", "B"}:
                key = next(iter(h.values()))[0]
                raise LoRAConfigError(f"{file}: key {key!r} has no lora_{'B' if 'A' in h else 'A'} partner; save the adapter again")
            (ka, a), (kb, b) = h["A"], h["B"]
            n_in, n_out = dims[module]
            if tuple(a.shape) != (config.r, n_in):
                raise LoRAConfigError(f"{file}: key {ka!r} has shape {list(a.shape)}, expected [{config.r}, {n_in}] "
                                      f"(r from adapter_config.json, the model's {module} input size); the adapter is for another model")
            if tuple(b.shape) != (n_out, config.r):
                raise LoRAConfigError(f"{file}: key {kb!r} has shape {list(b.shape)}, expected [{n_out}, {config.r}] "
                                      f"(the model's {module} output size, r); the adapter is for another model")
            weights[(layer, module)] = (a.to(dtype).contiguous(), (b.float() * config.scaling).to(dtype).contiguous())
        if not weights:
            raise LoRAConfigError(f"{file}: holds no LoRA weights")
        return cls(config, weights)
