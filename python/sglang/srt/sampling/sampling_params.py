"""Per-request sampling parameters: one table of accepted types and ranges.

``LIMITS`` is the single answer to "what may a client send": the engine
validates every ``SamplingParams`` against it (``sglang.Engine`` and plugins
bypass HTTP), and the HTTP layer builds its strict request models from it
(``sglang.srt.entrypoints.openai.protocol``). ``docs/server.md`` ("Limits and
validation") lists the same rows.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from sglang.srt.sampling.neutral import SAMPLING, fields_of

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# Below this a temperature is greedy: dividing logits by it would overflow to inf.
GREEDY_TEMPERATURE = 1e-6
MAX_STOP_STRINGS = 32
MAX_STOP_CHARS = 256
MAX_STOP_TOKEN_IDS = 256
MAX_LOGIT_BIAS = 1024
MAX_TOP_LOGPROBS = 20
MAX_CONSTRAINT_CHARS = 1 << 16  # a JSON schema, regex or EBNF grammar
CONSTRAINT_FIELDS = {"json_schema": "json", "regex": "regex", "ebnf": "ebnf"}  # field -> grammar-backend constraint kind


class SamplingParamsError(ValueError):
    """A sampling parameter is invalid; the message names it and the valid range."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def json_schema_problem(text: str) -> str | None:
    """Why ``text`` is no JSON schema (a JSON object, or upstream's ``$$ANY$$`` for any JSON value), or ``None``."""
    if text == "$$ANY$$":
        return None
    try:
        schema = json.loads(text)
    except ValueError as exc:
        return f"is not valid JSON: {exc}"
    return None if isinstance(schema, (dict, bool)) else "must be a JSON object (a JSON Schema), given as a string"


@dataclass(frozen=True)
class Limit:
    """Accepted values of one numeric or boolean sampling parameter (bounds inclusive)."""

    kind: type  # int, float or bool
    lo: float | None = None
    hi: float | None = None
    note: str = ""

    def check(self, name: str, v: Any) -> None:
        if self.kind is bool:
            if not isinstance(v, bool):
                raise SamplingParamsError(f"sampling parameter {name!r} must be true or false, got {v!r}", name)
            return
        ok = isinstance(v, int) if self.kind is int else isinstance(v, (int, float))
        if not ok or isinstance(v, bool):
            what = "an integer" if self.kind is int else "a number"
            raise SamplingParamsError(f"sampling parameter {name!r} must be {what}, got {v!r}", name)
        if isinstance(v, float) and not math.isfinite(v):
            raise SamplingParamsError(f"sampling parameter {name!r} must be finite, got {v!r}", name)
        if (self.lo is not None and v < self.lo) or (self.hi is not None and v > self.hi):
            raise SamplingParamsError(f"{name} must be in {self.describe()}, got {v!r}", name)

    def describe(self) -> str:
        if self.kind is bool:
            return "true or false"
        lo = "-inf" if self.lo is None else _fmt(self.lo)
        hi = "inf" if self.hi is None else _fmt(self.hi)
        return f"[{lo}, {hi}]"


def _fmt(x: float) -> str:
    if x in (INT64_MIN, INT64_MAX):
        return "-2**63" if x < 0 else "2**63-1"
    return f"{x:g}"


LIMITS: dict[str, Limit] = {
    "max_new_tokens": Limit(int, 0, 2**31 - 1, "also: prompt + max_new_tokens must fit the context"),
    "temperature": Limit(float, 0, 1e6, f"below {GREEDY_TEMPERATURE:g} it is greedy (top_k 1)"),
    "top_p": Limit(float, 1e-6, 1, "keep the smallest set of tokens whose probability reaches top_p"),
    "top_k": Limit(int, -1, 2**31 - 1, "-1 and 0 mean off"),
    "min_p": Limit(float, 0, 1),
    "repetition_penalty": Limit(float, 0.01, 2, "1 is off"),
    "frequency_penalty": Limit(float, -2, 2),
    "presence_penalty": Limit(float, -2, 2),
    "seed": Limit(int, INT64_MIN, INT64_MAX, "an int64, or null for the server's seed"),
    "top_logprobs_num": Limit(int, 0, MAX_TOP_LOGPROBS),
    "ignore_eos": Limit(bool),
    "logprobs": Limit(bool),
    "logprob_start_len": Limit(int, -1, 2**31 - 1, "with logprobs: prompt log-probabilities from this position (-1: none)"),
    "skip_special_tokens": Limit(bool),
}
LOGIT_BIAS_RANGE = (-100.0, 100.0)


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
    logprob_start_len: int = -1  # with logprobs: also the prompt's token log-probabilities from this position
    skip_special_tokens: bool = True
    logit_bias: dict[int, float] = field(default_factory=dict)
    # constrained decoding, at most one (upstream's names): a JSON schema as a string, a regex, an EBNF grammar
    json_schema: str | None = None
    regex: str | None = None
    ebnf: str | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None, vocab_size: int | None = None) -> SamplingParams:
        """Build, normalise and validate; raises :class:`SamplingParamsError` naming the field.

        ``vocab_size``, when known, bounds every token id (``stop_token_ids``,
        ``logit_bias`` keys). Safe on any JSON-like input: never raises anything else.
        """
        if d is None:
            d = {}
        if not isinstance(d, dict):
            raise SamplingParamsError(f"sampling_params must be an object, got {type(d).__name__}")
        d = dict(d)
        for name, neutral in fields_of(SAMPLING):  # upstream's parameters this engine lacks, sent as "nothing"
            if name in d:
                if not neutral.accepts(d[name]):
                    raise SamplingParamsError(neutral.problem(name, d[name]), name)
                del d[name]
        known = {f.name for f in fields(cls)}
        unknown = sorted(str(k) for k in set(d) - known)
        if unknown:
            raise SamplingParamsError(f"unsupported sampling parameter(s) {unknown}; supported: {sorted(known)}", unknown[0])
        if isinstance(d.get("stop"), str):
            d["stop"] = [d["stop"]]
        sp = cls(**{k: v for k, v in d.items() if v is not None or k == "seed"})
        sp.validate(vocab_size)
        sp.normalise()
        return sp

    def validate(self, vocab_size: int | None = None) -> None:
        """Check every field against ``LIMITS`` (types strictly: a bool is not a number)."""
        for name, limit in LIMITS.items():
            v = getattr(self, name)
            if v is None and name == "seed":
                continue
            limit.check(name, v)

        def token_id(name: str, t: Any) -> None:
            if not isinstance(t, int) or isinstance(t, bool) or t < 0 or (vocab_size is not None and t >= vocab_size):
                bound = f"[0, {vocab_size})" if vocab_size is not None else ">= 0"
                raise SamplingParamsError(f"{name} holds {t!r}: token ids must be integers in {bound}", name)

        if not isinstance(self.stop, list) or len(self.stop) > MAX_STOP_STRINGS or not all(
            isinstance(s, str) and 0 < len(s) <= MAX_STOP_CHARS for s in self.stop
        ):
            raise SamplingParamsError(f"stop must be a string or a list of at most {MAX_STOP_STRINGS} strings of 1 to {MAX_STOP_CHARS} characters", "stop")
        if not isinstance(self.stop_token_ids, list) or len(self.stop_token_ids) > MAX_STOP_TOKEN_IDS:
            raise SamplingParamsError(f"stop_token_ids must be a list of at most {MAX_STOP_TOKEN_IDS} token ids", "stop_token_ids")
        for t in self.stop_token_ids:
            token_id("stop_token_ids", t)
        if not isinstance(self.logit_bias, dict) or len(self.logit_bias) > MAX_LOGIT_BIAS:
            raise SamplingParamsError(f"logit_bias must be an object of at most {MAX_LOGIT_BIAS} token ids", "logit_bias")
        bias: dict[int, float] = {}
        for k, v in self.logit_bias.items():
            key = int(k) if isinstance(k, str) and k.isascii() and k.isdigit() and len(k) < 20 else k
            token_id("logit_bias", key)
            lo, hi = LOGIT_BIAS_RANGE
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
                raise SamplingParamsError(f"logit_bias[{k!r}] must be a number in [{lo:g}, {hi:g}], got {v!r}", "logit_bias")
            bias[key] = float(v)
        self.logit_bias = bias
        self._validate_constraint()

    def _validate_constraint(self) -> None:
        given = [name for name in CONSTRAINT_FIELDS if getattr(self, name) is not None]
        for name in given:
            v = getattr(self, name)
            if not isinstance(v, str) or not 0 < len(v) <= MAX_CONSTRAINT_CHARS:
                raise SamplingParamsError(f"{name} must be a non-empty string of at most {MAX_CONSTRAINT_CHARS} characters", name)
        if len(given) > 1:
            raise SamplingParamsError(f"at most one constraint per request; got {given} (pick one of {list(CONSTRAINT_FIELDS)})", given[1])
        problem = json_schema_problem(self.json_schema) if self.json_schema is not None else None
        if problem is not None:
            raise SamplingParamsError(f"json_schema {problem}", "json_schema")

    @property
    def constraint(self) -> tuple[str, str] | None:
        """``(kind, text)`` for the grammar backend, or ``None`` for free decoding."""
        for name, kind in CONSTRAINT_FIELDS.items():
            v = getattr(self, name)
            if v is not None:
                return kind, v
        return None

    def normalise(self) -> None:
        """One meaning per value: a near-zero temperature is greedy; top_k 0 is off."""
        if self.temperature < GREEDY_TEMPERATURE:
            self.temperature, self.top_k = 0.0, 1
        if self.top_k == 0:
            self.top_k = -1

    @property
    def greedy(self) -> bool:
        return self.temperature == 0 or self.top_k == 1

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
