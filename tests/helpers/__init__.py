"""Test helpers: real distributions on disk and fresh interpreters."""
