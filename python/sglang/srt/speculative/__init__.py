"""Speculative decoding: NGRAM drafts verified by one target forward per step (see docs/engine.md)."""
