"""LoRA backends: how a batch's adapter products are computed (a registry, ``--lora-backend``).

A backend turns the pool slot of every row into a batch plan once per forward (``prepare_batch``) and
then, for each wrapped linear layer, adds ``B[s] (A[s] x)`` to the rows of every segment of rows that
share slot ``s`` (``run``; the scaling is folded into ``B`` when the slot is filled). The loop runs over
the distinct slots of the batch (at most ``--max-loras-per-batch``), never over requests.

``torch_native`` (the default; upstream's pure-torch reference backend) sorts the adapter rows by slot
once per forward and runs one pair of matrix products per segment; rows of the base model take no
product at all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_BACKENDS: dict[str, Callable[[], Any]] = {}


def register_lora_backend(name: str, factory: Callable[[], Any]) -> None:
    """Add a backend under ``--lora-backend name`` (a plugin may add one for its device)."""
    if name in _BACKENDS:
        raise ValueError(f"a LoRA backend named {name!r} is already registered")
    _BACKENDS[name] = factory


def lora_backend_names() -> list[str]:
    return sorted(_BACKENDS)


def create_lora_backend(name: str) -> Any:
    if name not in _BACKENDS:
        raise ValueError(f"--lora-backend {name!r} is not registered; registered: {', '.join(lora_backend_names())}")
    return _BACKENDS[name]()


@dataclass
class LoRABatchInfo:
    """One forward's rows by adapter slot.

    ``single``: every row uses this one slot (no gather); else ``perm`` [n] the adapter rows sorted by
    slot, and ``segments`` ``(slot, lo, hi)`` ranges of ``perm``. ``slots``: the distinct slots used.
    """

    single: int | None
    perm: Any
    segments: list[tuple[int, int, int]]
    slots: frozenset[int]


class TorchNativeLoRABackend:
    """Segmented products in plain torch (any device torch runs on; the CPU implementation)."""

    name = "torch_native"

    def prepare_batch(self, row_slots: list[int], lens: list[int]) -> LoRABatchInfo | None:
        """``row_slots[i]``: request i's pool slot (-1: the base model); ``lens[i]``: its rows. None: no adapter row."""
        import torch

        used = {s for s in row_slots if s >= 0}
        if not used:
            return None
        if len(used) == 1 and all(s >= 0 for s in row_slots):
            return LoRABatchInfo(next(iter(used)), None, [], frozenset(used))
        per_row = torch.repeat_interleave(torch.tensor(row_slots), torch.tensor(lens))
        keep = (per_row >= 0).nonzero().squeeze(1)
        order = torch.argsort(per_row[keep], stable=True)
        perm = keep[order]
        slots, counts = torch.unique_consecutive(per_row[perm], return_counts=True)
        segments, lo = [], 0
        for s, c in zip(slots.tolist(), counts.tolist()):
            segments.append((s, lo, lo + c))
            lo += c
        return LoRABatchInfo(None, perm, segments, frozenset(used))

    def run(self, x: Any, out: Any, a: Any, bt: Any, info: LoRABatchInfo, active: Callable[[int], bool]) -> Any:
        """``out += B[s] (A[s] x)`` per segment. x ``[T, in]``, out ``[T, out]``, a ``[slots, R, in]``,
        bt ``[slots, R, out]`` (B transposed); ``active(s)``: slot s has weights in this layer."""
        if info.single is not None:
            s = info.single
            if active(s):
                out.addmm_(x @ a[s].t(), bt[s])
            return out
        xs = x.index_select(0, info.perm)
        deltas, rows = [], []
        for s, lo, hi in info.segments:
            if active(s):
                deltas.append((xs[lo:hi] @ a[s].t()) @ bt[s])
                rows.append(info.perm[lo:hi])
        if deltas:
            import torch

            out.index_add_(0, torch.cat(rows), torch.cat(deltas))
        return out


register_lora_backend("torch_native", TorchNativeLoRABackend)
