"""``Tokenizer``: encode, incremental-friendly decode, chat templates."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sglang.srt.model_loader.errors import ModelLoadError
from sglang.srt.model_loader.paths import resolve_model_path

_CONTROL = 3  # GGUF token type of special/control tokens


class Tokenizer:
    """Wraps a ``tokenizers.Tokenizer``; every process builds its own from the model path."""

    def __init__(self, backend: Any, eos_token_ids: set[int], bos_token_id: int | None, add_bos: bool, chat_template: str | None) -> None:
        self.backend = backend
        self.eos_token_ids = eos_token_ids
        self.bos_token_id = bos_token_id
        self.add_bos = add_bos
        self.chat_template = chat_template
        self.vocab_size = backend.get_vocab_size(with_added_tokens=True)
        self._template: Any = None

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        if len(text) > 4096:  # encode_batch releases the GIL (encode does not): a long prompt never stalls other threads
            ids = self.backend.encode_batch([text], add_special_tokens=False)[0].ids
        else:
            ids = self.backend.encode(text, add_special_tokens=False).ids
        if add_special_tokens and self.add_bos and self.bos_token_id is not None:
            ids = [self.bos_token_id, *ids]
        return ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self.backend.decode(ids, skip_special_tokens=skip_special_tokens)

    def apply_chat_template(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True,
                            tools: list[dict[str, Any]] | None = None) -> str:
        if not self.chat_template:
            raise ValueError("this model has no chat template; use the completions API with a plain prompt")
        if self._template is None:
            from jinja2.sandbox import ImmutableSandboxedEnvironment

            def raise_exception(msg: str) -> None:
                raise ValueError(f"chat template error: {msg}")

            env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
            env.globals["raise_exception"] = raise_exception
            self._template = env.from_string(self.chat_template)
        bos = self.backend.id_to_token(self.bos_token_id) if self.bos_token_id is not None else ""
        eos = self.backend.id_to_token(min(self.eos_token_ids)) if self.eos_token_ids else ""
        extra = {"tools": tools} if tools else {}
        return self._template.render(messages=messages, add_generation_prompt=add_generation_prompt, bos_token=bos, eos_token=eos, **extra)


def _from_gguf_info(info: dict[str, Any]) -> Tokenizer:
    from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers
    from tokenizers import Tokenizer as HFTokenizer

    if info.get("model") != "gpt2":
        raise ModelLoadError(f"GGUF tokenizer model {info.get('model')!r} is not supported (only byte-level BPE 'gpt2')")
    tokens = list(info["tokens"])
    vocab = {t: i for i, t in enumerate(tokens)}
    merges = [tuple(m.split(" ", 1)) for m in info["merges"]]
    backend = HFTokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if info.get("pre") == "smollm":  # digits are split one by one before the GPT-2 regex
        backend.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(r"\p{N}"), "isolated"), byte_level])
    else:
        backend.pre_tokenizer = byte_level
    backend.decoder = decoders.ByteLevel()
    types = list(info.get("token_type") or [])
    special = [AddedToken(tokens[i], special=True, normalized=False) for i, t in enumerate(types) if t == _CONTROL]
    backend.add_special_tokens(special)
    eos = info.get("eos_token_id")
    eos_ids = {int(eos)} if eos is not None else set()
    if info.get("chat_template") and "<|im_end|>" in vocab:
        eos_ids.add(vocab["<|im_end|>"])  # chat turns end here
    bos = info.get("bos_token_id")
    return Tokenizer(backend, eos_ids, None if bos is None else int(bos), bool(info.get("add_bos_token")), info.get("chat_template"))


def _from_dir(path: Path) -> Tokenizer:
    from tokenizers import Tokenizer as HFTokenizer

    tj = path / "tokenizer.json"
    if not tj.is_file():
        raise ModelLoadError(f"{path} has no tokenizer.json; pass --tokenizer-path to a directory with one")
    backend = HFTokenizer.from_file(str(tj))
    cfg = json.loads((path / "tokenizer_config.json").read_text()) if (path / "tokenizer_config.json").is_file() else {}
    model_cfg = json.loads((path / "config.json").read_text()) if (path / "config.json").is_file() else {}

    def tok_id(tok: Any) -> int | None:
        if isinstance(tok, dict):
            tok = tok.get("content")
        return backend.token_to_id(tok) if isinstance(tok, str) else None

    eos: set[int] = set()
    for v in (model_cfg.get("eos_token_id"), tok_id(cfg.get("eos_token"))):
        if isinstance(v, int):
            eos.add(v)
        elif isinstance(v, list):
            eos.update(v)
    bos = tok_id(cfg.get("bos_token"))
    return Tokenizer(backend, eos, bos, bool(cfg.get("add_bos_token", False)), cfg.get("chat_template"))


def load_tokenizer(model_path: str, tokenizer_path: str | None = None, gguf_info: dict[str, Any] | None = None) -> Tokenizer:
    """The tokenizer of ``tokenizer_path`` if given, else of the model.

    ``gguf_info`` is the model file's already-read tokenizer metadata (saves reading the GGUF again).
    """
    if tokenizer_path is None and gguf_info is not None:
        return _from_gguf_info(gguf_info)
    path = resolve_model_path(tokenizer_path or model_path)
    if path.is_dir():
        return _from_dir(path)
    from sglang.srt.model_loader.gguf_loader import read_gguf_tokenizer

    return _from_gguf_info(read_gguf_tokenizer(path))
