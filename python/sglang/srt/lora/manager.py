"""``LoRAManager``: the model runner's side of multi-LoRA serving.

It holds every loaded adapter's reference (by server-minted ``lora_id``), a host cache of their weights
bounded by ``--max-loaded-loras`` (an adapter dropped from it is read from disk again when a batch needs
it; pinned adapters are never dropped), the slot pool and the backend, and attaches a
:class:`~sglang.srt.lora.layers.LoRALinear` to each linear layer the pool holds buffers for.

Per forward the runner calls :meth:`prepare` with each request's ``lora_id`` (None: the base model):
missing adapters go into pool slots (evicting by ``--lora-eviction-policy``), then the backend's batch
plan is set for the layers to read, and :meth:`plan_rows` gives the fused decode plan, which computes
the same products itself, each row's slot; :meth:`finish` clears both. The scheduler asks :meth:`fits` before it
adds a request to a batch, so a batch never needs more slots than the pool has.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any

from sglang.srt.lora.adapter import LoRAAdapter
from sglang.srt.lora.backend import create_lora_backend
from sglang.srt.lora.errors import LoRAError
from sglang.srt.lora.layers import LoRALinear
from sglang.srt.lora.lora_registry import LoRARef
from sglang.srt.lora.mem_pool import LoRAMemoryPool, fused_layers_of, module_dims

logger = logging.getLogger(__name__)


class LoRAManager:
    def __init__(self, model: Any, cfg: Any, dtype: Any, device: Any) -> None:
        """``cfg``: the resolved ``lora`` bag (``get_lora()``)."""
        self.model, self.dtype = model, dtype
        self.max_per_batch = cfg.max_loras_per_batch
        self.max_loaded = cfg.max_loaded_loras
        self.dims = module_dims(model)
        self.num_layers = len(model.layers)
        self.pool = LoRAMemoryPool(model, cfg.max_loras_per_batch, cfg.max_lora_rank, set(cfg.lora_target_modules),
                                   cfg.lora_eviction_policy, dtype, device)
        self.backend = create_lora_backend(cfg.lora_backend)
        self.refs: dict[str, LoRARef] = {}
        self.host: OrderedDict[str, LoRAAdapter] = OrderedDict()  # lora_id -> weights, least recently used first
        self.batch: Any = None  # the current forward's plan (LoRABatchInfo), None outside adapter forwards
        self.row_slots: Any = None  # the current forward's pool slot of every row (int64 [rows], -1: base)
        for i, lins in enumerate(fused_layers_of(model)):
            for fused in self.pool.buffers[i]:
                lins[fused].lora = LoRALinear(self, i, fused)
        for ref in cfg.lora_paths or []:
            why = self.load(ref)
            if why is not None:
                raise LoRAError(f"--lora-paths {ref.lora_name}={ref.lora_path}: {why}")

    # -- adapters ------------------------------------------------------------------------
    def _read(self, ref: LoRARef) -> LoRAAdapter:
        return LoRAAdapter.load(ref.lora_path, self.dims, self.num_layers, self.dtype)

    def load(self, ref: LoRARef) -> str | None:
        """Read and check an adapter; why it cannot be served (the file, the key, the flag), or None when loaded."""
        if ref.lora_id in self.refs:
            return None
        try:
            adapter = self._read(ref)
        except LoRAError as exc:
            return str(exc)
        except OSError as exc:
            return f"{ref.lora_path}: {exc}"
        why = self.pool.can_support(adapter)
        if why is not None:
            return f"adapter {ref.lora_name!r} cannot be served: {why}"
        self.refs[ref.lora_id] = ref
        if ref.pinned:
            self.pool.pinned.add(ref.lora_id)
        self._cache(ref.lora_id, adapter)
        logger.info("LoRA adapter %s loaded from %s (rank %d, %s)", ref.lora_name, ref.lora_path, adapter.config.r,
                    ", ".join(sorted(adapter.modules)))
        return None

    def unload(self, lora_id: str) -> None:
        """Forget an adapter (no request uses it any more: the tokenizer manager waited)."""
        self.refs.pop(lora_id, None)
        self.host.pop(lora_id, None)
        self.pool.free(lora_id)

    def _cache(self, lora_id: str, adapter: LoRAAdapter, keep: frozenset[str] = frozenset()) -> None:
        self.host[lora_id] = adapter
        self.host.move_to_end(lora_id)
        if self.max_loaded is None:
            return
        for lid in list(self.host):  # least recently used first; pinned and in-use adapters stay
            if len(self.host) <= self.max_loaded:
                break
            if lid != lora_id and lid not in keep and not self.refs[lid].pinned:
                del self.host[lid]

    def fetch(self, lora_id: str, keep: frozenset[str] = frozenset()) -> LoRAAdapter:
        """The adapter's weights, from the host cache or read again from disk."""
        adapter = self.host.get(lora_id)
        if adapter is None:
            ref = self.refs.get(lora_id)
            if ref is None:
                raise LoRAError(f"LoRA adapter {lora_id} is not loaded (unloaded while queued?)")
            adapter = self._read(ref)
        self._cache(lora_id, adapter, keep)
        return adapter

    # -- batches ---------------------------------------------------------------------------
    def fits(self, lora_ids: set[str | None]) -> bool:
        """Whether one batch may hold these adapters: at most ``--max-loras-per-batch`` distinct ones, the
        base model counting as one, and the pool's pinned slots leave room for the unpinned ones."""
        adapters = {i for i in lora_ids if i is not None}
        if len(adapters) + (None in lora_ids) > self.max_per_batch:
            return False
        return len(adapters - self.pool.pinned) + len(self.pool.pinned) <= self.pool.slots

    def prepare(self, lora_ids: list[str | None], lens: list[int]) -> None:
        """Put the batch's adapters in slots and set the plan the layers read (None: no adapter row)."""
        import torch

        used = frozenset(i for i in lora_ids if i is not None)
        if not used:
            self.batch = self.row_slots = None
            return
        slots = self.pool.ensure(set(used), lambda lid: self.fetch(lid, used))
        per_req = [slots[i] if i is not None else -1 for i in lora_ids]
        self.batch = self.backend.prepare_batch(per_req, lens)
        self.row_slots = torch.repeat_interleave(torch.tensor(per_req, dtype=torch.long), torch.tensor(lens))

    def plan_rows(self) -> tuple[Any, Any]:
        """``(row slots [rows] int64, module mask [slots, 4] bool)`` of the prepared forward, for the fused plan."""
        return self.row_slots, self.pool.module_mask

    def finish(self) -> None:
        self.batch = self.row_slots = None

    def stats(self) -> tuple[int, int]:
        """``(slots used, slots total)`` of the pool."""
        return self.pool.used_slots(), self.pool.slots
