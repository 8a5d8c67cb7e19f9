"""Tokenizers: built from a GGUF's embedded vocabulary or a directory's tokenizer.json."""

from sglang.srt.tokenizer.tokenizer import Tokenizer, load_tokenizer

__all__ = ["Tokenizer", "load_tokenizer"]
