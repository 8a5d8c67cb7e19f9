"""Build real distributions (``*.dist-info`` with METADATA and entry_points.txt).

Put the returned directory on a fresh interpreter's ``sys.path`` (PYTHONPATH)
and ``importlib.metadata`` finds them exactly as it finds pip-installed ones.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path


def make_dist(
    root: Path,
    name: str,
    version: str = "0.1.0",
    entry_points: dict[str, dict[str, str]] | None = None,
    files: dict[str, str] | None = None,
) -> Path:
    """Write one distribution under ``root``; returns ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    info = root / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    lines = []
    for group, eps in (entry_points or {}).items():
        lines.append(f"[{group}]")
        lines += [f"{k} = {v}" for k, v in eps.items()]
        lines.append("")
    (info / "entry_points.txt").write_text("\n".join(lines))
    for rel, text in (files or {}).items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def clean_env(**extra: str) -> dict[str, str]:
    """The current environment minus every SGLANG_* variable, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_")}
    env.update(extra)
    return env


def run_python(code: str, paths: list[Path] | None = None, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter with ``paths`` first on ``sys.path``."""
    env = dict(env if env is not None else clean_env())
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(str(p) for p in paths)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def ok(proc: subprocess.CompletedProcess[str]) -> str:
    """Assert the subprocess succeeded; return its stdout."""
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc.stdout


def failed(proc: subprocess.CompletedProcess[str]) -> str:
    """Assert the subprocess failed; return stdout + stderr."""
    assert proc.returncode != 0, f"expected failure\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc.stdout + proc.stderr
