"""The per-layer hook: ``linear.lora`` adds the adapter products to a linear layer's output.

The LoRA manager sets ``linear.lora`` on each fused linear layer an adapter may touch (``qkv_proj``,
``o_proj``, ``gate_up_proj``, ``down_proj``); the layer calls :meth:`LoRALinear.apply` after its own
product. Outside a forward with adapter rows (``manager.batch is None``) it adds nothing and costs one
attribute read, so a base-only batch computes exactly what a server without LoRA computes.
"""

from __future__ import annotations

from typing import Any


class LoRALinear:
    """One fused linear layer's view of the adapter pool: its buffers and which slots hold weights here."""

    __slots__ = ("fused", "layer", "manager")

    def __init__(self, manager: Any, layer: int, fused: str) -> None:
        self.manager, self.layer, self.fused = manager, layer, fused

    def apply(self, x: Any, out: Any) -> Any:
        """``out`` plus ``B[s] (A[s] x)`` for every segment of rows whose adapter touches this layer."""
        info = self.manager.batch
        if info is None:
            return out
        pool = self.manager.pool
        a, bt = pool.buffers[self.layer][self.fused]
        mods = pool.slot_modules
        return self.manager.backend.run(x.reshape(-1, x.shape[-1]), out.view(-1, out.shape[-1]), a, bt, info,
                                        lambda s: self.fused in mods[s]).view(out.shape)
