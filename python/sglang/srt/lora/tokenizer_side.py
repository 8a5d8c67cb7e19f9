"""The tokenizer manager's side of multi-LoRA serving: request names to ``lora_id``s, load and unload.

Clients name adapters; :meth:`LoRAFrontend.acquire` turns a name into the server-minted ``lora_id`` the
scheduler keys its pool and prefix cache by, and counts the request as a user until it ends
(:meth:`release`). Loading asks every scheduler replica to read and check the adapter and registers the
name only when all succeed, so a failed load stays invisible; unloading forgets the name first (new
requests for it fail), waits until no request uses it, then tells the schedulers.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any

from sglang.srt.lora.lora_registry import LoRANotFound, LoRARef, LoRARegistry
from sglang.srt.lora.messages import LoRAUpdateOutput, LoRAUpdateReq

NOT_ENABLED = ("LoRA adapter {name!r} was requested, but LoRA is not enabled: start the server with --enable-lora "
               "(and --lora-paths NAME=PATH, or load adapters with POST /load_lora_adapter)")
UPDATE_TIMEOUT_S = 300.0
UNLOAD_WAIT_S = 600.0


class LoRAUnavailable(ValueError):
    """A request names an adapter that cannot serve it (LoRA off, or not loaded); the message says which and the fix."""


def acquire_lora(frontend: LoRAFrontend | None, name: Any) -> str | None:
    """The ``lora_id`` for a request's ``lora_path`` (None: the base model); LoRAUnavailable names the fix."""
    if name is None:
        return None
    if not isinstance(name, str) or not name:
        raise LoRAUnavailable(f"lora_path must be the name of a loaded LoRA adapter or null, got {name!r}")
    if frontend is None:
        raise LoRAUnavailable(NOT_ENABLED.format(name=name))
    return frontend.acquire(name)


def split_model(model: str | None, served: str) -> tuple[str | None, str | None]:
    """OpenAI ``model``: ``base:adapter`` split on the first colon; a served name that itself has a colon, or the
    served name / ``default`` alone, selects the base model. ``(base part, adapter or None)``."""
    if model is None or model in (served, "default") or ":" not in model:
        return model, None
    if model.startswith(served + ":") and ":" in served:  # "gpt-oss:120b:adapter" when serving "gpt-oss:120b"
        return served, model[len(served) + 1:] or None
    base, _, adapter = model.partition(":")
    return base, adapter or None


class LoRAFrontend:
    def __init__(self, refs: list[LoRARef], max_per_batch: int, send: Callable[[Any, int | None], None], replicas: int) -> None:
        self.registry = LoRARegistry(refs)
        self.max_per_batch = max_per_batch
        self._send, self._replicas = send, replicas
        self._ids = itertools.count()
        self._pending: dict[str, tuple[threading.Event, list[LoRAUpdateOutput]]] = {}
        self._update_lock = threading.Lock()  # one load or unload at a time

    # -- requests ----------------------------------------------------------------------------
    def acquire(self, name: str | None) -> str | None:
        """The ``lora_id`` of adapter ``name`` (None: the base model), counted as in use; LoRAUnavailable when not loaded."""
        if name is None:
            return None
        try:
            (ref,) = self.registry.acquire([name])
        except LoRANotFound as exc:
            raise LoRAUnavailable(str(exc)) from None
        assert ref is not None
        return ref.lora_id

    def release(self, lora_id: str | None) -> None:
        self.registry.release(lora_id)

    # -- load and unload ---------------------------------------------------------------------
    def on_output(self, out: LoRAUpdateOutput) -> None:
        entry = self._pending.get(out.req_id)
        if entry is not None:
            entry[1].append(out)
            if len(entry[1]) >= self._replicas:
                entry[0].set()

    def _ask(self, ref: LoRARef, unload: bool) -> str | None:
        """Send one update to every replica and wait for all; the first error, or None."""
        req_id = f"lora-{next(self._ids)}"
        event, outs = self._pending[req_id] = (threading.Event(), [])
        try:
            self._send(LoRAUpdateReq(req_id, ref, unload), None)
            if not event.wait(UPDATE_TIMEOUT_S):
                return f"the schedulers did not answer within {UPDATE_TIMEOUT_S:.0f}s"
        finally:
            self._pending.pop(req_id, None)
        return next((o.error or "failed" for o in outs if not o.success), None)

    def result(self, error: str | None) -> dict[str, Any]:
        """Upstream's ``LoRAUpdateOutput`` body."""
        return {"success": error is None, "error_message": error, "loaded_adapters": self.registry.loaded()}

    def load(self, name: str, path: str, pinned: bool = False) -> dict[str, Any]:
        """Load adapter ``path`` as ``name`` on every replica (blocking)."""
        with self._update_lock:
            if self.registry.get(name) is not None:
                return self.result(f"a LoRA adapter named {name!r} is already loaded; unload it first or pick another name")
            if pinned and sum(r.pinned for r in self.registry.refs()) + 1 > self.max_per_batch - 1:
                return self.result(f"at most --max-loras-per-batch - 1 = {self.max_per_batch - 1} adapters may be pinned; "
                                   "load it unpinned or raise --max-loras-per-batch")
            ref = LoRARef.make(name, path, pinned)
            error = self._ask(ref, unload=False)
            if error is not None:
                self._ask(ref, unload=True)  # replicas that did load it forget it again
                return self.result(error)
            self.registry.register(ref)
            return self.result(None)

    def unload(self, name: str) -> dict[str, Any]:
        """Unload adapter ``name`` once the requests using it have finished (blocking)."""
        with self._update_lock:
            try:
                ref = self.registry.unregister(name)
            except KeyError:
                return self.result(f"no LoRA adapter named {name!r} is loaded; loaded: {list(self.registry.loaded())}")
            if not self.registry.wait_for_unload(ref.lora_id, UNLOAD_WAIT_S):
                self.registry.register(ref)
                return self.result(f"requests still use {name!r} after {UNLOAD_WAIT_S:.0f}s; it stays loaded")
            return self.result(self._ask(ref, unload=True))

    def models(self) -> list[LoRARef]:
        return self.registry.refs()
