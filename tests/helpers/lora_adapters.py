"""Random PEFT adapters written to disk for the tests: the file layout ``--lora-paths`` reads."""

from __future__ import annotations

import json
from pathlib import Path

# this project's module name -> the PEFT sub-module that holds it in a Llama decoder layer
PEFT = {"q_proj": "self_attn", "k_proj": "self_attn", "v_proj": "self_attn", "o_proj": "self_attn",
        "gate_proj": "mlp", "up_proj": "mlp", "down_proj": "mlp"}


def write_adapter(path: Path, dims: dict[str, tuple[int, int]], layers: int, r: int, modules: list[str], seed: int,
                  scale: float = 0.05) -> None:
    """A rank-``r`` adapter on ``modules`` of ``layers`` layers (``dims``: module -> (in, out)), weights drawn from
    ``seed``; ``lora_alpha`` is ``2 r``."""
    import torch
    from safetensors.torch import save_file

    g, tensors = torch.Generator().manual_seed(seed), {}
    for i in range(layers):
        for m in modules:
            n_in, n_out = dims[m]
            key = f"base_model.model.model.layers.{i}.{PEFT[m]}.{m}"
            tensors[key + ".lora_A.weight"] = scale * torch.randn(r, n_in, generator=g)
            tensors[key + ".lora_B.weight"] = scale * torch.randn(n_out, r, generator=g)
    path.mkdir(parents=True)
    save_file(tensors, str(path / "adapter_model.safetensors"))
    (path / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": r, "lora_alpha": 2 * r, "target_modules": modules}))
