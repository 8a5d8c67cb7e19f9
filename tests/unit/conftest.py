from __future__ import annotations

import importlib
import itertools
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from sglang.srt.plugins.hook_registry import HookRegistry

_counter = itertools.count()

TARGET_SOURCE = '''
import asyncio

CALLS = []


def add(a, b=1):
    """Add two numbers."""
    return a + b


def returns_none():
    return None


async def fetch(x):
    await asyncio.sleep(0)
    return x * 2


class Base:
    def __init__(self, v=0):
        self.v = v

    def meth(self, x):
        return (self.v, x)

    @classmethod
    def make(cls, v):
        return cls(v)

    @staticmethod
    def static(x):
        return x + 100

    @property
    def prop(self):
        return self.v * 10


class Child(Base):
    pass
'''


@pytest.fixture(autouse=True)
def _unit_tier_starts_no_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """tests/unit is the fast tier: no subprocess, no compiler, no spawned engine (those live in
    tests/integration and tests/e2e). Starting one here fails the test that tried."""
    import multiprocessing.process
    import subprocess

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a unit test started a process: move it to tests/integration (marked slow/compiler/model)")

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", refuse)


@pytest.fixture
def registry() -> Iterator[type[HookRegistry]]:
    """The SRT registry, with every patch and registration undone afterwards."""
    with HookRegistry.isolated():
        HookRegistry.reset()
        yield HookRegistry


@pytest.fixture
def target_module(tmp_path: Path) -> Iterator[ModuleType]:
    """A fresh, real module (unique name) holding hook targets."""
    name = f"hook_targets_{next(_counter)}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(TARGET_SOURCE))
    sys.path.insert(0, str(tmp_path))
    try:
        yield importlib.import_module(name)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop(name, None)


@pytest.fixture
def alias_module(tmp_path: Path, target_module: ModuleType) -> Iterator[ModuleType]:
    """A second module holding ``from target import add, Base`` copies."""
    name = f"alias_holder_{next(_counter)}"
    (tmp_path / f"{name}.py").write_text(f"from {target_module.__name__} import add, Base\n")
    yield importlib.import_module(name)
    sys.modules.pop(name, None)
