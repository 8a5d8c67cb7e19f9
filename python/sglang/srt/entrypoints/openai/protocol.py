"""Strict request schemas of the OpenAI-compatible and native routes.

Types are strict (a boolean is never a number, a number never a string),
floats finite, strings valid Unicode, lists bounded; the sampling ranges come
from ``sglang.srt.sampling.sampling_params.LIMITS`` (one table for the HTTP
layer and the engine). A field this server does not implement is a 400 that
names it, never silently ignored; the fields listed in ``_NoEffect`` are
accepted because they do not change the output, and upstream's fields in
``sglang.srt.sampling.neutral.NEUTRAL`` are accepted with the value that means
"nothing" (any other value is a 400 naming the field).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    create_model,
    model_validator,
)
from pydantic_core import PydanticCustomError

from sglang.srt.managers.request_errors import unicode_problem
from sglang.srt.sampling.neutral import CHAT, COMPLETIONS, GENERATE, SAMPLING, Neutral, fields_of
from sglang.srt.sampling.sampling_params import (
    LIMITS,
    LOGIT_BIAS_RANGE,
    MAX_CONSTRAINT_CHARS,
    MAX_LOGIT_BIAS,
    MAX_STOP_CHARS,
    MAX_STOP_STRINGS,
    MAX_STOP_TOKEN_IDS,
    MAX_TOP_LOGPROBS,
    SamplingParams,
    json_schema_problem,
)

MAX_N = 16
MAX_TOKEN_IDS = 1 << 17  # longer than any context this server takes
MAX_MESSAGES = 4096
MAX_CONTENT_PARTS = 256
MAX_BATCH = 64  # prompts in one batched /generate or /v1/completions request


def _refusing(problem: Callable[[str], str | None], message: str) -> AfterValidator:
    """A validator that refuses a string for which ``problem`` names one (``message`` formats it)."""

    def check(v: str) -> str:
        found = problem(v)
        if found is not None:
            raise ValueError(message.format(found))
        return v

    return AfterValidator(check)


_unicode = _refusing(unicode_problem, "not valid Unicode text ({})")
Text = Annotated[StrictStr, _unicode]
StopText = Annotated[StrictStr, Field(min_length=1, max_length=MAX_STOP_CHARS), _unicode]
ConstraintText = Annotated[StrictStr, Field(min_length=1, max_length=MAX_CONSTRAINT_CHARS), _unicode]
SchemaText = Annotated[ConstraintText, _refusing(json_schema_problem, "json_schema {}")]
TokenId = Annotated[StrictInt, Field(ge=0, le=2**31 - 1)]
Room = Annotated[StrictInt, Field(ge=0, le=2**63 - 1)]  # a disaggregated request's bootstrap room
Finite = Annotated[float, Field(strict=True, allow_inf_nan=False)]


def limited(name: str) -> Any:
    """The annotation of sampling parameter ``name`` from ``LIMITS``."""
    lim = LIMITS[name]
    if lim.kind is bool:
        return StrictBool
    base = StrictInt if lim.kind is int else StrictFloat
    return Annotated[base, Field(ge=lim.lo, le=lim.hi, allow_inf_nan=False) if lim.kind is float else Field(ge=lim.lo, le=lim.hi)]


Stop = StopText | Annotated[list[StopText], Field(max_length=MAX_STOP_STRINGS)]
StopTokenIds = Annotated[list[TokenId], Field(max_length=MAX_STOP_TOKEN_IDS)]
LogitBias = Annotated[dict[Annotated[StrictStr, Field(pattern=r"^[0-9]{1,10}$")],
                           Annotated[Finite, Field(ge=LOGIT_BIAS_RANGE[0], le=LOGIT_BIAS_RANGE[1])]],
                      Field(max_length=MAX_LOGIT_BIAS)]


class _Req(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


def _only_neutral(name: str, neutral: Neutral) -> BeforeValidator:
    def check(v: Any) -> Any:
        if not neutral.accepts(v):
            raise PydanticCustomError("unsupported_value", "{problem}", {"problem": neutral.problem(name, v)})
        return v

    return BeforeValidator(check)


def neutral_fields(where: str) -> dict[str, Any]:
    """``create_model`` fields for the rows of ``NEUTRAL`` at ``where``: a neutral value is accepted and left out
    of every dump (it reaches nothing); any other is a 400 naming the field."""
    return {name: (Annotated[Any, _only_neutral(name, n)], Field(default=n.values[0], exclude=True)) for name, n in fields_of(where)}


class _NoEffect(_Req):
    """OpenAI fields accepted and ignored: they never change the output."""

    user: Text | None = None
    metadata: dict[str, Text] | None = None
    store: StrictBool | None = None
    service_tier: Text | None = None


class StreamOptions(_Req):
    include_usage: StrictBool = False


class JsonSchemaFormat(_Req):
    """``response_format.json_schema`` as OpenAI defines it (``schema`` absent: any JSON object)."""

    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)
    name: Annotated[StrictStr, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]
    description: Text | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: StrictBool | None = None


class ResponseFormat(_Req):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_iff_json_schema(self) -> ResponseFormat:
        if (self.type == "json_schema") != (self.json_schema is not None):
            raise ValueError("response_format.json_schema is required with type 'json_schema' and allowed only with it")
        return self

    def constraint(self) -> str | None:
        """The ``json_schema`` sampling parameter this format asks for (upstream's mapping), or ``None`` for text."""
        if self.type == "json_object":
            return '{"type": "object"}'
        if self.type == "json_schema":
            assert self.json_schema is not None
            return json.dumps(self.json_schema.schema_ if self.json_schema.schema_ is not None else {"type": "object"})
        return None


AdapterName = Annotated[StrictStr, Field(min_length=1, max_length=256), _unicode]


class _Bootstrap(_Req):
    """Where a disaggregated request's KV comes from (a router adds them; see docs/scale_out.md): the prefill
    server's bootstrap endpoint and the room pairing its prefill with this decode. ``bootstrap_room`` is one
    int per request; a batch (or ``n`` > 1) uses ``room + i`` for its ``i``-th request, or a list of rooms."""

    bootstrap_host: Annotated[StrictStr, Field(min_length=1, max_length=255)] | None = None
    bootstrap_port: Annotated[StrictInt, Field(ge=1, le=65535)] | None = None
    bootstrap_room: Room | Annotated[list[Room], Field(min_length=1, max_length=MAX_BATCH * 128)] | None = None

    def bootstrap_for(self, i: int) -> dict[str, Any] | None:
        """The bootstrap fields of the ``i``-th request this body opens, or ``None`` when none is sent."""
        if self.bootstrap_host is None and self.bootstrap_port is None and self.bootstrap_room is None:
            return None
        room = self.bootstrap_room
        if isinstance(room, list):
            if i >= len(room):
                raise ValueError(f"bootstrap_room has {len(room)} entries; request {i} of this body needs one")
            room = room[i]
        elif room is not None:
            room = (room + i) % 2**63
        return {"host": self.bootstrap_host, "port": self.bootstrap_port, "room": room}


class _Sampling(_NoEffect, _Bootstrap):
    model: Text | None = None
    # a loaded LoRA adapter's name (upstream's field name; model="base:adapter" also selects one and wins)
    lora_path: AdapterName | None = None
    max_tokens: Annotated[StrictInt, Field(ge=0, le=2**31 - 1)] | None = None
    max_completion_tokens: Annotated[StrictInt, Field(ge=0, le=2**31 - 1)] | None = None
    temperature: limited("temperature") | None = None
    top_p: limited("top_p") | None = None
    n: Annotated[StrictInt, Field(ge=1, le=MAX_N)] = 1
    stop: Stop | None = None
    seed: limited("seed") | None = None
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    frequency_penalty: limited("frequency_penalty") | None = None
    presence_penalty: limited("presence_penalty") | None = None
    logit_bias: LogitBias | None = None
    # sglang extensions, as upstream names them
    top_k: limited("top_k") | None = None
    min_p: limited("min_p") | None = None
    repetition_penalty: limited("repetition_penalty") | None = None
    ignore_eos: StrictBool | None = None
    stop_token_ids: StopTokenIds | None = None
    skip_special_tokens: StrictBool | None = None
    # constrained decoding: OpenAI's response_format, or one of upstream's extra fields
    response_format: ResponseFormat | None = None
    json_schema: SchemaText | None = None
    regex: ConstraintText | None = None
    ebnf: ConstraintText | None = None

    def constraints(self) -> dict[str, str]:
        """The constraint sampling parameters this request asks for (the engine takes at most one)."""
        out = {name: v for name in ("json_schema", "regex", "ebnf") if (v := getattr(self, name)) is not None}
        from_format = self.response_format.constraint() if self.response_format is not None else None
        if from_format is not None:
            out["response_format"] = from_format
        return out

    @model_validator(mode="after")
    def _one_constraint(self) -> _Sampling:
        given = self.constraints()
        if len(given) > 1:
            raise ValueError(f"at most one constraint per request; got {sorted(given)}")
        return self


TokenIds = Annotated[list[TokenId], Field(min_length=1, max_length=MAX_TOKEN_IDS)]


class CompletionRequest(create_model("_CompletionFields", __base__=_Sampling, **neutral_fields(COMPLETIONS))):  # type: ignore[misc]
    # one prompt (text or token ids), or a batch of them (choice index = prompt index * n + sample index)
    prompt: (Text | TokenIds | Annotated[list[Text], Field(min_length=1, max_length=MAX_BATCH)]
             | Annotated[list[TokenIds], Field(min_length=1, max_length=MAX_BATCH)])
    logprobs: Annotated[StrictInt, Field(ge=0, le=MAX_TOP_LOGPROBS)] | None = None
    echo: StrictBool = False
    best_of: Annotated[StrictInt, Field(ge=1, le=MAX_N)] | None = None
    suffix: Text | None = None

    @model_validator(mode="after")
    def _completion_only(self) -> CompletionRequest:
        if self.best_of is not None and self.best_of != self.n:
            raise ValueError(f"best_of {self.best_of} with n {self.n} is not supported: each choice is one sample; omit best_of")
        if self.suffix:
            raise ValueError("suffix is not supported (no fill-in-the-middle); omit it")
        return self


class TextPart(_Req):
    type: Literal["text"]
    text: Text


FunctionName = Annotated[StrictStr, Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]
MAX_TOOLS = 128


class FunctionDef(_Req):
    name: FunctionName
    description: Text | None = None
    parameters: dict[str, Any] | None = None  # a JSON schema of the arguments object
    strict: StrictBool | None = None


class Tool(_Req):
    type: Literal["function"]
    function: FunctionDef


class FunctionRef(_Req):
    name: FunctionName


class NamedToolChoice(_Req):
    type: Literal["function"]
    function: FunctionRef


class CalledFunction(_Req):
    name: FunctionName
    arguments: Text


class ToolCall(_Req):
    id: Annotated[StrictStr, Field(min_length=1, max_length=128)]
    type: Literal["function"]
    function: CalledFunction


class ChatMessage(_Req):
    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: Text | Annotated[list[TextPart], Field(max_length=MAX_CONTENT_PARTS)] | None = None
    name: Text | None = None
    tool_calls: Annotated[list[ToolCall], Field(max_length=MAX_TOOLS)] | None = None  # an assistant's earlier calls
    tool_call_id: Annotated[StrictStr, Field(min_length=1, max_length=128)] | None = None  # a tool result's call

    @model_validator(mode="after")
    def _tool_fields_by_role(self) -> ChatMessage:
        if self.tool_calls is not None and self.role != "assistant":
            raise ValueError(f"tool_calls is allowed only in assistant messages, not in a {self.role} message")
        if self.tool_call_id is not None and self.role != "tool":
            raise ValueError(f"tool_call_id is allowed only in tool messages, not in a {self.role} message")
        return self


class ChatCompletionRequest(create_model("_ChatFields", __base__=_Sampling, **neutral_fields(CHAT))):  # type: ignore[misc]
    messages: Annotated[list[ChatMessage], Field(min_length=1, max_length=MAX_MESSAGES)]
    logprobs: StrictBool = False
    top_logprobs: Annotated[StrictInt, Field(ge=0, le=MAX_TOP_LOGPROBS)] | None = None
    tools: Annotated[list[Tool], Field(max_length=MAX_TOOLS)] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: StrictBool | None = None

    @model_validator(mode="after")
    def _tool_choice_fits_the_tools(self) -> ChatCompletionRequest:
        names = [t.function.name for t in self.tools or []]
        if len(set(names)) != len(names):
            raise ValueError(f"tools holds a function name twice: {sorted(n for n in set(names) if names.count(n) > 1)}")
        choice = self.tool_choice
        if isinstance(choice, NamedToolChoice) and choice.function.name not in names:
            raise ValueError(f"tool_choice names the function {choice.function.name!r}, which is not in tools {names}")
        if choice == "required" and not names:
            raise ValueError("tool_choice 'required' needs tools")
        if names and choice not in (None, "none", "auto") and self.constraints():
            raise ValueError(f"at most one constraint per request; got tool_choice and {sorted(self.constraints())}")
        return self


class _OneConstraint(_Req):
    @model_validator(mode="after")
    def _at_most_one(self) -> _OneConstraint:
        given = [name for name in ("json_schema", "regex", "ebnf") if getattr(self, name, None) is not None]
        if len(given) > 1:
            raise ValueError(f"at most one constraint per request; got {given}")
        return self


def _sampling_model() -> type[BaseModel]:
    """The ``sampling_params`` object of ``/generate``: every ``SamplingParams`` field, strictly typed."""
    special = {"stop": Stop, "stop_token_ids": StopTokenIds, "logit_bias": LogitBias,
               "json_schema": SchemaText, "regex": ConstraintText, "ebnf": ConstraintText}
    fields: dict[str, Any] = {}
    for name in SamplingParams.__dataclass_fields__:
        ann = special.get(name) or limited(name)
        fields[name] = (ann | None, None)
    return create_model("GenerateSamplingParams", __base__=_OneConstraint, **fields, **neutral_fields(SAMPLING))


GenerateSamplingParams = _sampling_model()


class GenerateRequest(create_model("_GenerateFields", __base__=_Bootstrap, **neutral_fields(GENERATE))):  # type: ignore[misc]
    """The native ``/generate`` API, in upstream SGLang's shape.

    ``text`` (or ``input_ids``) may be a list: a batch, answered with a list.
    The log-probability fields sit at the top level, as upstream has them.
    """

    text: Text | Annotated[list[Text], Field(min_length=1, max_length=MAX_BATCH)] | None = None
    input_ids: (Annotated[list[TokenId], Field(min_length=1, max_length=MAX_TOKEN_IDS)]
                | Annotated[list[Annotated[list[TokenId], Field(min_length=1, max_length=MAX_TOKEN_IDS)]], Field(min_length=1, max_length=MAX_BATCH)]
                | None) = None
    sampling_params: GenerateSamplingParams | Annotated[list[GenerateSamplingParams], Field(min_length=1, max_length=MAX_BATCH)] | None = None  # type: ignore[valid-type]
    stream: StrictBool = False
    return_logprob: StrictBool = False
    top_logprobs_num: limited("top_logprobs_num") = 0
    logprob_start_len: limited("logprob_start_len") = -1
    return_text_in_logprobs: StrictBool = False
    rid: Annotated[StrictStr, Field(min_length=1, max_length=128)] | Annotated[list[Annotated[StrictStr, Field(min_length=1, max_length=128)]], Field(min_length=1, max_length=MAX_BATCH)] | None = None
    # a loaded LoRA adapter's name, or one (or null: the base model) per prompt of a batch
    lora_path: AdapterName | Annotated[list[AdapterName | None], Field(min_length=1, max_length=MAX_BATCH)] | None = None

    @model_validator(mode="after")
    def _one_prompt_kind(self) -> GenerateRequest:
        if (self.text is None) == (self.input_ids is None):
            raise ValueError("pass exactly one of 'text' or 'input_ids'")
        n = self.batch_size
        if n is not None and self.stream:
            raise ValueError("stream takes a single prompt; send one streaming request per prompt")
        for name in ("sampling_params", "rid", "lora_path"):
            v = getattr(self, name)
            if isinstance(v, list) and len(v) != (n or 1):
                raise ValueError(f"{name} has {len(v)} entries for {n or 1} prompts; pass one per prompt or a single one")
        return self

    @property
    def batch_size(self) -> int | None:
        """How many prompts a batch holds, or ``None`` for a single prompt."""
        if isinstance(self.text, list):
            return len(self.text)
        if isinstance(self.input_ids, list) and self.input_ids and isinstance(self.input_ids[0], list):
            return len(self.input_ids)
        return None

    def lora_paths(self) -> list[str | None]:
        """The adapter name of each prompt (None: the base model)."""
        n = self.batch_size or 1
        return list(self.lora_path) if isinstance(self.lora_path, list) else [self.lora_path] * n

    def items(self) -> list[tuple[str | None, list[int] | None, dict[str, Any], str | None]]:
        """One ``(text, input_ids, sampling params, rid)`` per prompt, the log-probability fields folded in."""
        n = self.batch_size or 1
        texts = self.text if isinstance(self.text, list) else [self.text] * n
        ids = self.input_ids if self.batch_size and self.input_ids is not None else [self.input_ids] * n
        sps = self.sampling_params if isinstance(self.sampling_params, list) else [self.sampling_params] * n
        rids = self.rid if isinstance(self.rid, list) else [self.rid] * n
        out = []
        for text, i, sp, rid in zip(texts, ids, sps, rids):
            params = sp.model_dump(exclude_none=True) if sp is not None else {}
            if self.return_logprob:
                params.update(logprobs=True, top_logprobs_num=self.top_logprobs_num, logprob_start_len=self.logprob_start_len)
            out.append((text, i, params, rid))  # type: ignore[arg-type]
        return out


class AbortRequest(_Req):
    rid: StrictStr = ""
    abort_all: StrictBool = False


class LoadLoRARequest(_Req):
    """``POST /load_lora_adapter``: a PEFT adapter directory on the server, served as ``lora_name``."""

    lora_name: AdapterName
    lora_path: Annotated[StrictStr, Field(min_length=1, max_length=4096), _unicode]
    pinned: StrictBool = False


class UnloadLoRARequest(_Req):
    lora_name: AdapterName


class ProfileRequest(_Req):
    output_dir: Text | None = None
    num_steps: Annotated[StrictInt, Field(ge=1, le=100000)] | None = None
