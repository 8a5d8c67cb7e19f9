"""Messages of run-time adapter updates between the tokenizer manager and the schedulers (pickled over ZMQ)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class LoRAUpdateReq:
    """Tokenizer manager -> every scheduler: load ``ref`` (a ``LoRARef``) or, with ``unload``, forget it."""

    req_id: str
    ref: Any
    unload: bool = False


@dataclass
class LoRAUpdateOutput:
    """Scheduler -> tokenizer manager: the result of one ``LoRAUpdateReq`` (``error``: why it failed)."""

    req_id: str
    success: bool
    error: str | None = None
    dp_rank: int = 0
