"""Per-request sampling parameters; invalid values name the parameter."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any


class SamplingParamsError(ValueError):
    """A sampling parameter is invalid; the message names it and the valid range."""


@dataclass
class SamplingParams:
    max_new_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1  # -1: off
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    seed: int | None = None
    logprobs: bool = False
    top_logprobs_num: int = 0
    skip_special_tokens: bool = True

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> SamplingParams:
        d = dict(d or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise SamplingParamsError(f"unknown sampling parameter(s) {unknown}; known: {sorted(known)}")
        if isinstance(d.get("stop"), str):
            d["stop"] = [d["stop"]]
        sp = cls(**{k: v for k, v in d.items() if v is not None or k == "seed"})
        sp.validate()
        return sp

    def validate(self) -> None:
        def need(cond: bool, msg: str) -> None:
            if not cond:
                raise SamplingParamsError(msg)

        def num(name: str, integer: bool = False) -> None:
            v = getattr(self, name)
            ok = isinstance(v, int) if integer else isinstance(v, (int, float))
            need(ok and not isinstance(v, bool), f"sampling parameter {name!r} must be a number, got {v!r}")

        for n in ("temperature", "top_p", "min_p", "repetition_penalty", "frequency_penalty", "presence_penalty"):
            num(n)
        for n in ("max_new_tokens", "top_k", "top_logprobs_num"):
            num(n, integer=True)
        need(self.max_new_tokens >= 0, f"max_new_tokens must be >= 0, got {self.max_new_tokens}")
        need(self.temperature >= 0, f"temperature must be >= 0, got {self.temperature}")
        need(0 < self.top_p <= 1, f"top_p must be in (0, 1], got {self.top_p}")
        need(self.top_k == -1 or self.top_k >= 1, f"top_k must be -1 (off) or >= 1, got {self.top_k}")
        need(0 <= self.min_p <= 1, f"min_p must be in [0, 1], got {self.min_p}")
        need(self.repetition_penalty > 0, f"repetition_penalty must be > 0, got {self.repetition_penalty}")
        need(-2 <= self.frequency_penalty <= 2, f"frequency_penalty must be in [-2, 2], got {self.frequency_penalty}")
        need(-2 <= self.presence_penalty <= 2, f"presence_penalty must be in [-2, 2], got {self.presence_penalty}")
        need(isinstance(self.stop, list) and all(isinstance(s, str) and s for s in self.stop), "stop must be a non-empty string or a list of them")
        need(isinstance(self.stop_token_ids, list) and all(isinstance(t, int) for t in self.stop_token_ids), "stop_token_ids must be a list of integers")
        need(self.seed is None or (isinstance(self.seed, int) and not isinstance(self.seed, bool)), f"seed must be an integer, got {self.seed!r}")
        need(0 <= self.top_logprobs_num <= 20, f"top_logprobs_num must be in [0, 20], got {self.top_logprobs_num}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0 or self.top_k == 1

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
