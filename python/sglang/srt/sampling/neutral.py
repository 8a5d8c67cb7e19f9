"""Upstream request fields this server does not implement, and the value of each that means "nothing".

Upstream's clients send some of them on every request with that value (its SDKs send
``"return_hidden_states": false``): such a request is served, the field dropped. Any other value is a
400 naming the field and why. This is the one table: the HTTP models
(``sglang.srt.entrypoints.openai.protocol``) and the engine (``SamplingParams.from_dict``, for the
``sampling_params`` rows) both read it; ``docs/server.md`` lists it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

GENERATE, COMPLETIONS, CHAT, SAMPLING = "generate", "completions", "chat", "sampling_params"  # where a field sits
OPENAI = (COMPLETIONS, CHAT)
ALL = (GENERATE, *OPENAI)


@dataclass(frozen=True)
class Neutral:
    values: tuple[Any, ...]  # the values that change nothing; the first is the default named in errors
    why: str  # what this server lacks, and the flag that upstream serves it with where there is one
    where: tuple[str, ...]

    def accepts(self, v: Any) -> bool:
        """``v`` is one of the neutral values (a bool is not a number), or a per-prompt list of them."""
        if isinstance(v, list) and GENERATE in self.where and v and not any(isinstance(n, list) for n in self.values):
            return all(self.accepts(x) for x in v)
        return any(type(v) is type(n) and v == n for n in self.values)

    def problem(self, name: str, v: Any) -> str:
        shown = " or ".join(json.dumps(n) for n in self.values)
        return f"{name}={json.dumps(v)[:80]} is not supported: {self.why}; send {shown} or omit the field"


_LORA_ID = "an adapter's id is minted by the server; name the adapter with lora_path"
_PD = "upstream's pair keys and prefill/decode servers of different tensor-parallel sizes are not implemented"
_MM = "multimodal inputs are not implemented; send text"
_DP = "routing to a chosen data-parallel replica is not implemented (--load-balance-method picks it)"
_NO_REASONING = "there is no --reasoning-parser, so the output has no separate reasoning"

NEUTRAL: dict[str, Neutral] = {
    # lora_path is a real field (a loaded adapter's name); the id is minted by the server and never read from a client
    "lora_id": Neutral((None,), _LORA_ID, (GENERATE,)),
    "custom_logit_processor": Neutral((None,), "custom logit processors are not implemented (upstream: --enable-custom-logit-processor)", ALL),
    "custom_params": Neutral((None,), "custom logit processors are not implemented (upstream: --enable-custom-logit-processor)",
                             (*OPENAI, SAMPLING)),
    "return_hidden_states": Neutral((False,), "hidden states are not returned", ALL),
    "return_routed_experts": Neutral((False,), "no mixture-of-experts routing is recorded", ALL),
    "routed_experts_start_len": Neutral((0,), "no mixture-of-experts routing is recorded", ALL),
    "return_indexer_topk": Neutral((False,), "no sparse-attention indexer is served", (GENERATE,)),
    "return_entropy": Neutral((False,), "entropies are not returned", (GENERATE,)),
    "return_cached_tokens_details": Neutral((False,), "cached-token details are not returned", OPENAI),
    "return_token_ids": Neutral((False,), "token ids are not returned on the OpenAI routes (POST /generate returns output_ids)", OPENAI),
    "return_prompt_token_ids": Neutral((False,), "token ids are not returned on the OpenAI routes", (CHAT,)),
    "return_meta_info": Neutral((False,), "meta_info is not returned on the OpenAI routes (POST /generate returns it)", (CHAT,)),
    "token_ids_logprob": Neutral((None,), "log-probabilities of chosen token ids are not implemented (top_logprobs_num is)", (GENERATE,)),
    "session_params": Neutral((None,), "sessions are not implemented", ALL),
    "session_id": Neutral((None,), "sessions are not implemented", OPENAI),
    "input_embeds": Neutral((None,), "input embeddings are not accepted; send text or input_ids", (GENERATE,)),
    "positional_embed_overrides": Neutral((None,), "embedding overrides are not accepted", (GENERATE,)),
    "image_data": Neutral((None,), _MM, (GENERATE,)),
    "video_data": Neutral((None,), _MM, (GENERATE,)),
    "audio_data": Neutral((None,), _MM, (GENERATE,)),
    "modalities": Neutral((None,), _MM, (GENERATE,)),
    "use_audio_in_video": Neutral((False,), _MM, (GENERATE, CHAT)),
    "max_dynamic_patch": Neutral((None,), _MM, (GENERATE, CHAT)),
    "min_dynamic_patch": Neutral((None,), _MM, (GENERATE, CHAT)),
    "images_config": Neutral((None,), _MM, OPENAI),
    "bootstrap_pair_key": Neutral((None,), _PD, (GENERATE,)),
    "decode_tp_size": Neutral((None,), _PD, (GENERATE,)),
    "routed_dp_rank": Neutral((None,), _DP, ALL),
    "data_parallel_rank": Neutral((None,), _DP, ALL),
    "disagg_prefill_dp_rank": Neutral((None,), _DP, ALL),
    "priority": Neutral((None,), "request priorities are not implemented", ALL),
    "extra_key": Neutral((None,), "cache keys per request are not implemented", ALL),
    "cache_salt": Neutral((None,), "cache keys per request are not implemented", OPENAI),
    "routing_key": Neutral((None,), "routing keys are not implemented", (GENERATE,)),
    "ngram_corpus_id": Neutral((None,), "speculative decoding corpora are not implemented", OPENAI),
    "custom_labels": Neutral((None,), "custom metric labels are not implemented", ALL),
    "log_metrics": Neutral((True,), "metrics are recorded for every request", (GENERATE,)),
    "no_logs": Neutral((False,), "--log-requests decides what is logged", (GENERATE,)),
    "require_reasoning": Neutral((False,), _NO_REASONING, (GENERATE,)),
    "separate_reasoning": Neutral((True, False), _NO_REASONING, (CHAT,)),
    "stream_reasoning": Neutral((True, False), _NO_REASONING, (CHAT,)),
    "reasoning_effort": Neutral((None,), _NO_REASONING, (CHAT,)),
    "chat_template_kwargs": Neutral((None, {}), "chat template arguments are not implemented", (CHAT,)),
    "continue_final_message": Neutral((False,), "continuing the final assistant message is not implemented", (CHAT,)),
    "input_ids": Neutral((None,), "pre-tokenized chat prompts are not accepted; send messages", (CHAT,)),
    "rid": Neutral((None,), "request ids on the OpenAI routes are not implemented (POST /generate takes rid)", OPENAI),
    "background": Neutral((False,), "background requests are not implemented", (GENERATE,)),
    "conversation_id": Neutral((None,), "conversations are not implemented", (GENERATE,)),
    "return_bytes": Neutral((False,), "this runtime returns no images", (GENERATE,)),
    "min_tokens": Neutral((0,), "a minimum output length is not implemented", OPENAI),
    "stop_regex": Neutral((None,), "stop regexes are not implemented; use stop", (*OPENAI, SAMPLING)),
    "no_stop_trim": Neutral((False,), "a matched stop string is always trimmed from the output", (*OPENAI, SAMPLING)),
    # the sampling_params of POST /generate (and of sglang.Engine)
    "min_new_tokens": Neutral((0,), "a minimum output length is not implemented", (SAMPLING,)),
    "n": Neutral((1,), "one sample per prompt on POST /generate: send the prompt n times, or use /v1/completions with n", (SAMPLING,)),
    "spaces_between_special_tokens": Neutral((True,), "special tokens are detokenized as the tokenizer joins them", (SAMPLING,)),
    "structural_tag": Neutral((None,), "structural tags are not implemented; use json_schema, regex or ebnf", (SAMPLING,)),
    "stream_interval": Neutral((None,), "the server's --stream-interval sets how many tokens a streamed chunk carries", (SAMPLING,)),
}


def fields_of(where: str) -> Iterator[tuple[str, Neutral]]:
    """The table's rows for one place: ``generate``, ``completions``, ``chat`` or ``sampling_params``."""
    return ((name, n) for name, n in NEUTRAL.items() if where in n.where)
