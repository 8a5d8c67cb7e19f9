"""The project's tests use the helpers it ships to plugin authors (``sglang.testing.plugins``)."""

from __future__ import annotations

import subprocess

from sglang.testing.plugins import clean_env, make_dist, run_python


def ok(proc: subprocess.CompletedProcess[str]) -> str:
    """Assert the subprocess succeeded; return its stdout."""
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc.stdout


def failed(proc: subprocess.CompletedProcess[str]) -> str:
    """Assert the subprocess failed; return stdout + stderr."""
    assert proc.returncode != 0, f"expected failure\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc.stdout + proc.stderr


__all__ = ["clean_env", "failed", "make_dist", "ok", "run_python"]
