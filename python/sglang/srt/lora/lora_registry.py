"""``LoRARef`` (a frozen adapter reference) and ``LoRARegistry`` (the tokenizer manager's names).

A ref's ``lora_id`` is deterministic, ``uuid5(NAMESPACE_URL, f"{name}\\0{path}")``, so every process
and node mints the same id for the same adapter; the scheduler keys its adapter cache, its pool and the
prefix cache's namespace by it. Clients only ever send names: the id is never read from a request.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass


def deterministic_id(name: str, path: str) -> str:
    return uuid.uuid5(uuid.NAMESPACE_URL, f"{name}\0{path}").hex


@dataclass(frozen=True)
class LoRARef:
    """One adapter: its id, name, path, whether it is pinned in the pool, and whether it can be re-read."""

    lora_id: str
    lora_name: str
    lora_path: str
    pinned: bool = False
    reloadable: bool = True

    @classmethod
    def make(cls, name: str, path: str, pinned: bool = False) -> LoRARef:
        return cls(deterministic_id(name, path), name, path, bool(pinned))


class LoRANotFound(LookupError):
    """A request named adapters that are not loaded; the message lists the loaded ones."""


class LoRARegistry:
    """Name -> ``LoRARef`` in LRU order, plus how many unfinished requests use each adapter.

    Thread-safe: request threads ``acquire``/``release``, the HTTP handlers ``register``/``unregister``.
    """

    def __init__(self, refs: list[LoRARef]) -> None:
        for r in refs:
            assert isinstance(r, LoRARef), "lora_paths should have been normalized to LoRARef objects during server initialization"
        self._lock = threading.Lock()
        self._by_name: OrderedDict[str, LoRARef] = OrderedDict((r.lora_name, r) for r in refs)
        self._users: dict[str, int] = {}

    def register(self, ref: LoRARef) -> None:
        with self._lock:
            self._by_name[ref.lora_name] = ref

    def unregister(self, name: str) -> LoRARef:
        """Forget ``name`` (new requests for it fail from now on); its ref. KeyError when unknown."""
        with self._lock:
            return self._by_name.pop(name)

    def get(self, name: str) -> LoRARef | None:
        with self._lock:
            return self._by_name.get(name)

    def loaded(self) -> dict[str, str]:
        """``{name: path}`` of every loaded adapter (the ``loaded_adapters`` of the update responses)."""
        with self._lock:
            return {n: r.lora_path for n, r in self._by_name.items()}

    def refs(self) -> list[LoRARef]:
        with self._lock:
            return list(self._by_name.values())

    def acquire(self, names: list[str | None]) -> list[LoRARef | None]:
        """Refs of ``names`` (``None``: the base model), each counted as in use; LoRANotFound lists the missing."""
        with self._lock:
            missing = [n for n in names if n is not None and n not in self._by_name]
            if missing:
                raise LoRANotFound(f"The following requested LoRA adapters are not loaded: {', '.join(dict.fromkeys(missing))}\n"
                                   f"Loaded adapters: {list(self._by_name)}.")
            out: list[LoRARef | None] = []
            for n in names:
                if n is None:
                    out.append(None)
                    continue
                ref = self._by_name[n]
                self._by_name.move_to_end(n)  # LRU order
                self._users[ref.lora_id] = self._users.get(ref.lora_id, 0) + 1
                out.append(ref)
            return out

    def release(self, lora_id: str | None) -> None:
        if lora_id is None:
            return
        with self._lock:
            left = self._users.get(lora_id, 0) - 1
            if left > 0:
                self._users[lora_id] = left
            else:
                self._users.pop(lora_id, None)

    def users(self, lora_id: str) -> int:
        with self._lock:
            return self._users.get(lora_id, 0)

    def wait_for_unload(self, lora_id: str, timeout: float = 600.0) -> bool:
        """Block until no request uses ``lora_id`` (True), or ``timeout`` passes (False)."""
        deadline = time.monotonic() + timeout
        while self.users(lora_id):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True
