"""``LoRAMemoryPool``: a fixed pool of ``--max-loras-per-batch`` adapter slots on the model's device.

For each decoder layer and each fused linear layer an adapter may touch (``config.FUSED_LAYERS``,
limited to ``--lora-target-modules``) the pool holds ``A[slot] [parts * R, in]`` and
``Bt[slot] [parts * R, out]`` (``B`` transposed; ``R`` = ``--max-lora-rank``): part j's ``A`` fills rows
``[j R, j R + r)``, its ``B`` (scaled) the same rows of ``Bt`` over the columns of its outputs, zeros
elsewhere, so one pair of products computes every stacked part (q/k/v, gate/up). ``Bt`` rows are
contiguous over the outputs: the fused decode plan adds them as vector axpys and skips the zero rows of a
smaller rank (``layers/cpu_kernels/csrc/lora_product.h``); the fused plan holds these same buffers.
A slot is refilled when a batch needs an adapter that is not resident: a free slot, else the unpinned
slot the batch does not use that ``--lora-eviction-policy`` names (lru: least recently used; fifo:
loaded first). Pinned adapters keep their slot until unloaded.
"""

from __future__ import annotations

import itertools
from typing import Any

from sglang.srt.lora.config import FUSED_LAYERS
from sglang.srt.lora.errors import LoRAError

_tick = itertools.count(1)


def fused_layers_of(model: Any) -> list[dict[str, Any]]:
    """Per decoder layer, ``{fused name: linear module}`` of a Llama-layout model."""
    return [{"qkv_proj": layer.self_attn.qkv_proj, "o_proj": layer.self_attn.o_proj,
             "gate_up_proj": layer.mlp.gate_up_proj, "down_proj": layer.mlp.down_proj} for layer in model.layers]


def module_dims(model: Any) -> dict[str, tuple[int, int]]:
    """``{PEFT module: (in, out)}`` of the model's first layer."""
    lins = fused_layers_of(model)[0]
    out: dict[str, tuple[int, int]] = {}
    for fused, parts in FUSED_LAYERS.items():
        lin = lins[fused]
        sizes = getattr(lin, "part_sizes", [lin.weight.shape[0]])
        for p, size in zip(parts, sizes):
            out[p] = (int(lin.weight.shape[1]), int(size))
    return out


class LoRAMemoryPool:
    def __init__(self, model: Any, slots: int, max_rank: int, targets: set[str], policy: str, dtype: Any, device: Any) -> None:
        import torch

        self.slots, self.max_rank, self.policy = slots, max_rank, policy
        self.targets = set(targets)
        self.layers = fused_layers_of(model)
        # per layer: {fused name: (A [slots, parts*R, in], Bt [slots, parts*R, out])}
        self.buffers: list[dict[str, tuple[Any, Any]]] = []
        for lins in self.layers:
            bufs = {}
            for fused, parts in FUSED_LAYERS.items():
                if not set(parts) & self.targets:
                    continue
                w = lins[fused].weight
                width = len(parts) * max_rank
                bufs[fused] = (torch.zeros(slots, width, w.shape[1], dtype=dtype, device=device),
                               torch.zeros(slots, width, w.shape[0], dtype=dtype, device=device))
            self.buffers.append(bufs)
        self.uid: list[str | None] = [None] * slots  # lora_id held by each slot
        self.slot_of: dict[str, int] = {}
        self.pinned: set[str] = set()
        self.used_at = [0] * slots  # lru
        self.loaded_at = [0] * slots  # fifo
        self.slot_modules: list[frozenset[str]] = [frozenset()] * slots  # fused layers with weights, per slot
        # the same as a [slots, fused layers] mask in FUSED_LAYERS order (the fused decode plan's lora_mask)
        self.module_mask = torch.zeros(slots, len(FUSED_LAYERS), dtype=torch.bool)

    def can_support(self, adapter: Any) -> str | None:
        """Why the adapter cannot go into this pool (its rank, its modules), or None."""
        c = adapter.config
        if c.r > self.max_rank:
            return f"its rank {c.r} exceeds --max-lora-rank {self.max_rank}; restart with a larger --max-lora-rank"
        extra = adapter.modules - self.targets
        if extra:
            return f"it targets {sorted(extra)}, outside --lora-target-modules {sorted(self.targets)}; restart with them added (or all)"
        return None

    def used_slots(self) -> int:
        return sum(u is not None for u in self.uid)

    def _victim(self, keep: set[str]) -> int:
        free = [i for i, u in enumerate(self.uid) if u is None]
        if free:
            return free[0]
        cands = [i for i, u in enumerate(self.uid) if u not in keep and u not in self.pinned]
        if not cands:
            raise LoRAError(f"no adapter slot is free: {len(keep)} adapters in one batch, {len(self.pinned)} pinned, "
                            f"{self.slots} slots (--max-loras-per-batch)")
        order = self.used_at if self.policy == "lru" else self.loaded_at
        return min(cands, key=lambda i: order[i])

    def ensure(self, lora_ids: set[str], fetch: Any, pinned: set[str] | None = None) -> dict[str, int]:
        """Slots of ``lora_ids``, loading the missing ones (``fetch(lora_id)`` -> adapter)."""
        now = next(_tick)
        for lid in lora_ids:
            if lid not in self.slot_of:
                self.load(self._victim(lora_ids), lid, fetch(lid))
            self.used_at[self.slot_of[lid]] = now
        if pinned:
            self.pinned |= pinned & lora_ids
        return {lid: self.slot_of[lid] for lid in lora_ids}

    def load(self, slot: int, lora_id: str, adapter: Any) -> None:
        import torch

        old = self.uid[slot]
        if old is not None:
            del self.slot_of[old]
        present: set[str] = set()
        r = adapter.config.r
        for i, bufs in enumerate(self.buffers):
            for fused, (a_buf, b_buf) in bufs.items():
                a_buf[slot].zero_()
                b_buf[slot].zero_()
                row = 0
                for j, part in enumerate(FUSED_LAYERS[fused]):
                    size = b_buf.shape[2] if len(FUSED_LAYERS[fused]) == 1 else self.layers[i][fused].part_sizes[j]
                    w = adapter.weights.get((i, part))
                    if w is not None:
                        a, b = w
                        a_buf[slot, j * self.max_rank : j * self.max_rank + r].copy_(a)
                        b_buf[slot, j * self.max_rank : j * self.max_rank + r, row : row + size].copy_(b.t())
                        present.add(fused)
                    row += size
        self.uid[slot] = lora_id
        self.slot_of[lora_id] = slot
        self.loaded_at[slot] = next(_tick)
        self.slot_modules[slot] = frozenset(present)
        self.module_mask[slot] = torch.tensor([f in present for f in FUSED_LAYERS])

    def free(self, lora_id: str) -> None:
        """Drop an unloaded adapter from its slot (its buffers are refilled by the next load)."""
        self.pinned.discard(lora_id)
        slot = self.slot_of.pop(lora_id, None)
        if slot is not None:
            self.uid[slot] = None
            self.slot_modules[slot] = frozenset()
            self.module_mask[slot] = False
