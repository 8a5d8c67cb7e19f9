"""Messages between the processes (pickled over ZMQ)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class TokenizedGenerateReqInput:
    rid: str
    input_ids: list[int]
    sampling_params: dict[str, Any]
    stream: bool = False
    bootstrap: dict[str, Any] | None = None  # prefill/decode disaggregation: host, port, room of the prefill side
    lora_id: str | None = None  # minted by the tokenizer manager's LoRA registry from the adapter's name; None: the base model


@dataclass
class AbortReq:
    rid: str


@dataclass
class FlushCacheReq:
    pass


@dataclass
class BatchTokenIDOut:
    """Scheduler -> detokenizer: new tokens of each request this step."""

    rids: list[str]
    new_token_ids: list[list[int]]
    finished_reasons: list[dict[str, Any] | None]
    prompt_tokens: list[int]
    completion_tokens: list[int]
    cached_tokens: list[int]
    logprobs: list[list[Any]]
    skip_special_tokens: list[bool]
    stop_strings: list[list[str]]
    input_logprobs: list[list[Any] | None]  # prompt log-probabilities, with a request's first output only
    spec: list[dict[str, Any] | None] = field(default_factory=list)  # speculative decoding's meta_info fields (None: off)


@dataclass
class BatchStrOut:
    """Detokenizer -> tokenizer manager: text deltas."""

    rids: list[str]
    texts: list[str]  # the new text of each request
    output_ids: list[list[int]]
    finished_reasons: list[dict[str, Any] | None]
    meta: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class SchedulerStats:
    """Scheduler -> tokenizer manager (via detokenizer): load figures for /metrics."""

    num_running: int
    num_waiting: int
    kv_used_pages: int
    kv_total_pages: int
    cached_pages: int
    hook_failures: list[dict[str, Any]] = field(default_factory=list)  # HookRegistry.call_failures() of the scheduler
    dp_rank: int = 0  # the data-parallel replica that reports
    disagg: dict[str, float] = field(default_factory=dict)  # disaggregation queue gauges and failure counts, by metric name
    lora_slots_used: int = 0  # LoRA adapter pool slots holding an adapter (0 of 0 without --enable-lora)
    lora_slots_total: int = 0

    # speculative decoding (None: off): accepted tokens per verify step and accepted / proposed drafts since /flush_cache
    spec_accept_length: float | None = None
    spec_accept_rate: float | None = None


@dataclass
class SchedulerError:
    """A request that failed in the engine: rejected (e.g. longer than the KV cache, status 400) or
    failed while it was served (status 500); only that request ends, the engine keeps serving."""

    rid: str
    message: str
    status: int = 400


@dataclass
class EngineFatal:
    """Scheduler -> tokenizer manager: the scheduler is stopping; every pending request fails with ``message``."""

    message: str


@dataclass
class ProfileReq:
    """Tokenizer manager -> every scheduler rank: start or stop the torch profiler.

    ``stop`` writes ``<output_dir>/<stamp>-TP<rank>.trace.json``; ``num_steps`` stops by itself after
    that many forward steps."""

    action: str  # "start" | "stop"
    output_dir: str = ""
    stamp: str = ""
    num_steps: int | None = None
