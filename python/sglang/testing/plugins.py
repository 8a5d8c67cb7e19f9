"""Test plugins the way this project tests them: real distributions, fresh interpreters.

Discovery runs once per process, so a plugin test installs a temporary
distribution (a real ``*.dist-info`` with ``entry_points.txt``) and runs the
code under test in a fresh interpreter that has it on ``sys.path``::

    def test_my_platform_is_selected(plugin_dist):
        plugin_dist.add("my-plugin", {"sglang.srt.platforms": {"my_device": "my_plugin:activate"}},
                        files={"my_plugin/__init__.py": "def activate():\\n    return 'my_plugin.p.P'\\n", ...})
        out = plugin_dist.run("from sglang.srt.platforms import current_platform; print(current_platform)")
        assert out.returncode == 0

In-process hook tests use :func:`restored_hooks`, which puts back every target
either runtime's registry patched and every registration made inside it.

The ``plugin_dist`` fixture is registered with pytest through the ``pytest11``
entry point of the ``sglang`` distribution; ``pytest_plugins =
["sglang.testing.plugins"]`` in a ``conftest.py`` works as well.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def make_dist(
    root: Path,
    name: str,
    version: str = "0.1.0",
    entry_points: dict[str, dict[str, str]] | None = None,
    files: dict[str, str] | None = None,
) -> Path:
    """Write one distribution under ``root`` (its dist-info plus ``files``); returns ``root``.

    ``entry_points`` maps group -> {name: "module:attr"}; ``files`` maps a path
    relative to ``root`` to its source (dedented).
    """
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
    """The current environment minus every ``SGLANG_*`` variable, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_")}
    env.update(extra)
    return env


def run_python(code: str, paths: list[Path] | None = None, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``code`` (dedented) in a fresh interpreter with ``paths`` first on ``sys.path``."""
    env = dict(env if env is not None else clean_env())
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(str(p) for p in paths)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout, env=env)


class PluginDists:
    """Temporary distributions under one directory, and a way to run code that sees them."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def add(self, name: str, entry_points: dict[str, dict[str, str]], files: dict[str, str] | None = None, version: str = "0.1.0") -> Path:
        return make_dist(self.root, name, version, entry_points, files)

    def run(self, code: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
        """Run ``code`` in a fresh interpreter; ``SGLANG_*`` variables are cleared unless given here."""
        return run_python(code, [self.root], clean_env(**env), timeout)

    def command(self, args: list[str], timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
        """Run a command (e.g. ``["sglang", "plugins", "check", "my-plugin"]``) that sees the distributions."""
        e = clean_env(**env)
        e["PYTHONPATH"] = os.pathsep.join([str(self.root), *([e["PYTHONPATH"]] if e.get("PYTHONPATH") else [])])
        exe = Path(sys.executable).parent / args[0]
        cmd = [str(exe) if exe.exists() else args[0], *args[1:]]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=e)


def _plugin_dist(tmp_path: Path) -> PluginDists:
    """Install temporary plugin distributions for subprocesses (see :class:`PluginDists`)."""
    return PluginDists(tmp_path / "site")


try:  # the helpers above work without pytest; the fixture needs it
    import pytest
except ImportError:  # pragma: no cover - pytest is a test extra
    plugin_dist: Any = None
else:
    plugin_dist = pytest.fixture(name="plugin_dist")(_plugin_dist)


@contextlib.contextmanager
def restored_hooks() -> Iterator[None]:
    """On exit, every target hooked by the SRT or diffusion registry is as before, registrations too."""
    from sglang.multimodal_gen.runtime.platforms.plugins import HookRegistry as DiffusionHooks
    from sglang.srt.plugins.hook_registry import HookRegistry as SrtHooks

    with SrtHooks.isolated(), DiffusionHooks.isolated():
        yield
