"""Guardrails: each one checks the package, and each is shown to fire."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from helpers import guardrails as g

# `global` statements allowed per file (by name). A new module-level runtime
# global belongs on a flags group or a resources slot; shrink this, never grow it.
GLOBALS_PIN: dict[str, set[str]] = {}
LEGACY_ACCESSOR_PIN = 0
MUTATION_PIN = 0


def _pkg(tmp_path: Path, source: str, rel: str = "srt/bad.py") -> Path:
    path = tmp_path / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source))
    return tmp_path


def test_mutation_ratchet_is_at_zero():
    assert len(g.mutation_violations()) == MUTATION_PIN, "\n".join(g.mutation_violations())


@pytest.mark.parametrize(
    "source",
    ["def f(server_args):\n    server_args.tp_size = 2\n", "def f(self):\n    self.server_args.page_size += 1\n", "def f(server_args):\n    setattr(server_args, 'x', 1)\n", "def f(server_args):\n    object.__setattr__(server_args, 'x', 1)\n"],
)
def test_mutation_ratchet_fires(tmp_path, source):
    found = g.mutation_violations(_pkg(tmp_path, source))
    assert len(found) == 1 and "srt/bad.py:2:" in found[0] and "get_context().override" in found[0]


def test_mutation_ratchet_spares_the_pipeline(tmp_path):
    assert g.mutation_violations(_pkg(tmp_path, "def f(server_args):\n    server_args.x = 1\n", "srt/arg_groups/p.py")) == []


def test_legacy_accessor_ratchet_is_pinned():
    assert len(g.legacy_accessor_calls()) == LEGACY_ACCESSOR_PIN, "\n".join(g.legacy_accessor_calls())


def test_legacy_accessor_ratchet_fires(tmp_path):
    found = g.legacy_accessor_calls(_pkg(tmp_path, "from sglang.srt.server_args import get_global_server_args\nx = get_global_server_args()\n"))
    assert found == ["srt/bad.py:2: call get_server_args() (runtime_context) instead of the legacy get_global_server_args()"]


def test_module_state_ratchet_is_pinned_by_name():
    found = g.global_statements()
    assert found == GLOBALS_PIN, f"new `global` statements {found}: put runtime state on a flags group or resources slot"


def test_module_state_ratchet_fires(tmp_path):
    found = g.global_statements(_pkg(tmp_path, "_x = None\ndef f():\n    global _x\n    _x = 1\n"))
    assert found == {"srt/bad.py": {"_x"}} != GLOBALS_PIN


def test_every_bag_read_names_a_field_of_that_namespace():
    assert g.bag_read_violations() == []


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("from x import get_schedule\nv = get_schedule().page_size\n", "get_schedule().page_size reads 'page_size' from bag 'schedule', but it has NS('memory')"),
        ("from x import get_exec\nv = get_exec().attention_backend\n", "reads 'attention_backend' from bag 'exec', but it has NS('exec.attention')"),
        ("from x import get_memory\nv = get_memory().pagesize\n", "reads 'pagesize' from bag 'memory', but it has no ServerArgs field"),
        ("from x import get_exec\nv = get_exec().attention\n", "stops at a sub-bag"),
    ],
)
def test_bag_read_lint_fires(tmp_path, source, message):
    found = g.bag_read_violations(_pkg(tmp_path, source))
    assert len(found) == 1 and message in found[0], found


def test_bag_read_lint_accepts_leaves_methods_and_live_topology(tmp_path):
    src = "a = get_exec().attention.attention_backend\nb = get_memory().override(page_size=1)\nc = get_parallel().tp_rank\nd = get_parallel().nnodes\n"
    assert g.bag_read_violations(_pkg(tmp_path, src)) == []
