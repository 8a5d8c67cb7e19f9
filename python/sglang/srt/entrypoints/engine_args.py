"""Upstream SGLang's keyword arguments of ``Engine.generate`` / ``async_generate``, mapped onto this engine.

Upstream takes the log-probability options at the top level (``return_logprob``, ``logprob_start_len``,
``top_logprobs_num``: one value, or for a batch one per prompt); this engine reads them from each prompt's
``sampling_params`` (``logprobs``, ``logprob_start_len``, ``top_logprobs_num``), so :func:`per_prompt`
writes them there, and a field given both ways with different values is a :class:`RequestError` naming
both. ``rid`` and ``bootstrap_host`` / ``bootstrap_port`` / ``bootstrap_room`` are honoured (what
``TokenizerManager.submit`` takes as ``rid`` and ``bootstrap``). Every other upstream keyword is accepted
by name and refused unless it carries the value that means "nothing": the rows of
``sglang.srt.sampling.neutral.NEUTRAL``, the table the HTTP API reads, say which value that is and why.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass
from typing import Any

from sglang.srt.managers.request_errors import RequestError
from sglang.srt.sampling.neutral import GENERATE, NEUTRAL, Neutral

# upstream's top-level keyword -> the sampling_params field this engine reads
LOGPROB_FIELDS = {"return_logprob": "logprobs", "logprob_start_len": "logprob_start_len", "top_logprobs_num": "top_logprobs_num"}

_MM = NEUTRAL["image_data"].why
# upstream keywords that NEUTRAL (a table of request fields) has no row for
_ENGINE_ONLY = {
    "mm_hashes": Neutral((None,), _MM, (GENERATE,)),
    "mm_content_hashes": Neutral((None,), _MM, (GENERATE,)),
    "external_trace_header": Neutral((None,), "request tracing is not implemented", (GENERATE,)),
}
# upstream keywords this engine does not implement: those its signatures name, then those taken through ``**more``
NAMED_KEYWORDS = ("image_data", "token_ids_logprob", "custom_logit_processor", "return_hidden_states", "data_parallel_rank")
MORE_KEYWORDS = (
    "audio_data", "video_data", "mm_hashes", "mm_content_hashes", "require_reasoning", "return_routed_experts",
    "routed_experts_start_len", "routed_dp_rank", "disagg_prefill_dp_rank", "external_trace_header", "session_params",
    "priority", "session_id", "cache_salt",
)  # fmt: skip
_DP_RANKS = ("data_parallel_rank", "routed_dp_rank")


@dataclass(frozen=True)
class Prompt:
    """One prompt of a call: what ``TokenizerManager.submit`` takes for it."""

    text: str | None
    input_ids: list[int] | None
    sampling_params: dict[str, Any] | None
    rid: str | None = None
    bootstrap: dict[str, Any] | None = None
    lora_path: str | None = None


def refuse_unsupported(method: str, given: dict[str, Any], dp_size: int = 1) -> None:
    """Raise :class:`RequestError` naming the first of ``given`` (upstream keyword -> value) that asks for
    something this engine does not do; ``TypeError``, as Python would, for a keyword upstream does not take either.

    ``data_parallel_rank`` / ``routed_dp_rank`` 0 on a single replica is served: it names the only one."""
    for name, value in given.items():
        if name not in NAMED_KEYWORDS and name not in MORE_KEYWORDS:
            raise TypeError(f"{method}() got an unexpected keyword argument {name!r}")
        neutral = NEUTRAL.get(name) or _ENGINE_ONLY[name]
        if neutral.accepts(value) or (name in _DP_RANKS and dp_size == 1 and type(value) is int and value == 0):
            continue
        shown = " or ".join(repr(v) for v in neutral.values)
        raise RequestError(f"{name}={value!r:.80} is not supported by this engine: {neutral.why}; pass {shown} or leave it out", name)


def _spread(name: str, value: Any, n: int | None) -> list[Any]:
    """``value`` once per prompt: ``n`` is the batch's size, or ``None`` for a single prompt (no list then)."""
    if n is None:
        if isinstance(value, list):
            raise RequestError(f"{name} is a list, but the prompt is single: pass one value", name)
        return [value]
    if not isinstance(value, list):
        return [value] * n
    if len(value) != n:
        raise RequestError(f"{name} has {len(value)} entries for {n} prompts; pass one per prompt or a single one", name)
    return list(value)


def _with_logprob_args(sp: Any, wanted: dict[str, Any]) -> Any:
    """``sp`` (one prompt's sampling params) with upstream's top-level log-probability arguments written in;
    ``sp`` itself is never changed. A value given both ways differently is refused, naming both."""
    wanted = {k: v for k, v in wanted.items() if v is not None and not (k == "return_logprob" and v is False)}
    if not wanted or (sp is not None and not isinstance(sp, dict)):
        return sp  # nothing to write, or not a dict: SamplingParams.from_dict refuses it, naming sampling_params
    out = dict(sp or {})
    for name, value in wanted.items():
        if name == "return_logprob" and value is not True:
            raise RequestError(f"return_logprob must be True or False, got {value!r:.80}", name)
        field = LOGPROB_FIELDS[name]
        if out.get(field) is not None and out[field] != value:
            raise RequestError(
                f"{name}={value!r:.80} and sampling_params[{field!r}]={out[field]!r:.80} disagree; "
                f"give it once (the sampling_params field or the {name} argument)",
                name,
            )
        out[field] = value
    return out


def _bootstraps(host: Any, port: Any, room: Any, n: int | None) -> list[dict[str, Any] | None]:
    """Each prompt's ``bootstrap`` (``host``, ``port``, ``room``); a batch's single room is ``room + i`` for its
    ``i``-th prompt, as ``POST /generate`` does. The tokenizer manager checks the values against the server's mode."""
    count = 1 if n is None else n
    if host is None and port is None and room is None:
        return [None] * count
    hosts, ports = _spread("bootstrap_host", host, n), _spread("bootstrap_port", port, n)
    if isinstance(room, int) and not isinstance(room, bool) and n is not None:
        rooms = [(room + i) % 2**63 for i in range(n)]
    else:
        rooms = _spread("bootstrap_room", room, n)
    return [{"host": h, "port": p, "room": r} for h, p, r in zip(hosts, ports, rooms)]


def _rids(rid: Any, n: int | None, running: Container[str]) -> list[str | None]:
    """Each prompt's request id (``None``: the engine names it); ids must be distinct and not running."""
    if rid is None:
        return [None] * (1 if n is None else n)
    if n is not None and not isinstance(rid, list):
        raise RequestError(f"rid is one id for a batch of {n} prompts; pass a list of {n} distinct ids", "rid")
    rids = _spread("rid", rid, n)
    seen: set[str] = set()
    for r in rids:
        if not isinstance(r, str) or not r:
            raise RequestError(f"rid must be a non-empty string, got {r!r:.80}", "rid")
        if r in seen or r in running:
            where = "twice in this batch" if r in seen else "by a request that is still running"
            raise RequestError(f"rid {r!r:.80} is used {where}; pass a unique rid", "rid")
        seen.add(r)
    return rids


def per_prompt(
    method: str,
    prompt: Any,
    input_ids: Any,
    sampling_params: Any,
    *,
    lora_path: Any = None,
    return_logprob: Any = False,
    logprob_start_len: Any = None,
    top_logprobs_num: Any = None,
    rid: Any = None,
    bootstrap_host: Any = None,
    bootstrap_port: Any = None,
    bootstrap_room: Any = None,
    stream: bool = False,
    refused: dict[str, Any] | None = None,
    running: Container[str] = (),
    dp_size: int = 1,
) -> tuple[list[Prompt], bool]:
    """The prompts of one ``method`` call (``generate`` or ``async_generate``), and whether it is a batch (a list of
    prompts or of ``input_ids`` lists).

    ``sampling_params``, ``lora_path``, the log-probability arguments and the ``bootstrap_*`` fields are one value
    or a list of one per prompt; ``rid`` is one per prompt; ``stream`` takes a single prompt. ``refused``: upstream's
    arguments this engine does not implement (:func:`refuse_unsupported`); ``running``: the ids of the requests in
    flight; ``dp_size``: the number of replicas. Raises :class:`RequestError` naming the argument for a list of the
    wrong length, a list for a single prompt, a conflict, or an unsupported value; nothing is submitted here."""
    refuse_unsupported(method, refused or {}, dp_size)
    batch = isinstance(prompt, list) or (isinstance(input_ids, list) and bool(input_ids) and isinstance(input_ids[0], list))
    if batch and stream:
        raise RequestError("stream=True takes a single prompt", "stream")
    n = (len(prompt) if isinstance(prompt, list) else len(input_ids)) if batch else None
    texts = prompt if isinstance(prompt, list) else [prompt] * (n or 1)
    ids = input_ids if batch and input_ids is not None else [input_ids] * (n or 1)
    params = _spread("sampling_params", sampling_params, n)
    loras = _spread("lora_path", lora_path, n)
    logprob_args = {
        name: _spread(name, v, n)
        for name, v in (
            ("return_logprob", return_logprob),
            ("logprob_start_len", logprob_start_len),
            ("top_logprobs_num", top_logprobs_num),
        )
    }
    rooms = _bootstraps(bootstrap_host, bootstrap_port, bootstrap_room, n)
    rids = _rids(rid, n, running)
    out = []
    for i, (text, i_ids, sp, lora, boot, r) in enumerate(zip(texts, ids, params, loras, rooms, rids)):
        sp = _with_logprob_args(sp, {name: values[i] for name, values in logprob_args.items()})
        out.append(Prompt(text, i_ids, sp, r, boot, lora))
    return out, batch


# the arguments of generate / async_generate that per_prompt reads by name, beyond the prompt and NAMED_KEYWORDS
_CALL_ARGS = ("lora_path", "return_logprob", "logprob_start_len", "top_logprobs_num", "rid", "bootstrap_host", "bootstrap_port",
              "bootstrap_room", "stream")  # fmt: skip


def from_call(method: str, args: dict[str, Any], running: Container[str], dp_size: int) -> tuple[list[Prompt], bool]:
    """:func:`per_prompt` over the arguments of one ``Engine.generate`` / ``async_generate`` call (``args``: its
    ``locals()``, so the two signatures' parameter names are the contract; ``**more`` holds upstream's rest)."""
    refused = {name: args[name] for name in NAMED_KEYWORDS} | args.get("more", {})
    return per_prompt(
        method,
        args["prompt"],
        args["input_ids"],
        args["sampling_params"],
        refused=refused,
        running=running,
        dp_size=dp_size,
        **{name: args[name] for name in _CALL_ARGS},
    )
