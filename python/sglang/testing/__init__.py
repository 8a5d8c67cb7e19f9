"""Test helpers for plugin authors (``sglang.testing.plugins``)."""
