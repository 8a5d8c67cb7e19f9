"""One request's state in the tokenizer manager: what the detokenizer has sent for it, and its waiters."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from sglang.srt.managers.tokenizer_loop_recv import on_loop


@dataclass
class ReqState:
    rid: str
    prompt_tokens: int
    chunks: list[dict[str, Any]] = field(default_factory=list)
    text: str = ""
    output_ids: list[int] = field(default_factory=list)
    finished: dict[str, Any] | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    logprobs: list[Any] = field(default_factory=list)
    input_logprobs: list[Any] | None = None  # (logprob, top) of the prompt's tokens from max(1, logprob_start_len)
    input_ids: list[int] = field(default_factory=list)  # kept only when prompt log-probabilities are asked for
    logprob_start_len: int = -1
    dp_rank: int = 0  # the data-parallel replica serving it
    lora_id: str | None = None  # its adapter, released when it ends
    error: BaseException | None = None
    abort_sent: bool = False
    created: float = field(default_factory=time.perf_counter)
    last_chunk: float = 0.0
    event: threading.Event = field(default_factory=threading.Event)
    loop: asyncio.AbstractEventLoop | None = None
    aevent: asyncio.Event | None = None

    def add_message(self, text: str, ids: list[int], reason: dict[str, Any] | None, meta: dict[str, Any]) -> None:
        """Take one message of the detokenizer's (the caller holds the manager's lock). Each chunk keeps what the
        request had reached with it, so a consumer that takes several chunks at once gives each its own cumulative
        text, counts and finish reason, not the latest for all."""
        self.text += text
        self.output_ids.extend(ids)
        self.logprobs.extend(meta.get("logprobs") or [])
        if "input_logprobs" in meta:
            self.input_logprobs = meta["input_logprobs"]
        self.meta = meta
        self.chunks.append({"text": text, "token_ids": list(ids), "finished": reason, "text_len": len(self.text),
                            "n_out": len(self.output_ids), "meta": meta})

    def wake(self) -> None:
        """Wake the sync and async waiters. A waiter whose event loop has closed (its Engine user is gone) is
        skipped: the receive thread goes on to the batch's other requests."""
        self.event.set()
        if self.loop is not None and self.aevent is not None and not self.loop.is_closed():
            if on_loop(self.loop):  # the HTTP server's loop reads the results itself: no second wake
                self.aevent.set()
                return
            try:
                self.loop.call_soon_threadsafe(self.aevent.set)
            except RuntimeError:  # closed between the check and the call
                pass
