"""docs/plugin_contract.md, the contract tables and the platform classes stay in step."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from sglang.cli.plugins.contract_doc import render_document
from sglang.multimodal_gen.runtime.platforms.contract import DIFFUSION_CONTRACT, diffusion_classes
from sglang.plugin_core.contract_table import public_members
from sglang.srt.platforms.contract import SRT_CONTRACT, srt_classes

DOC = Path(__file__).resolve().parents[2] / "docs" / "plugin_contract.md"
TABLES = [("srt", SRT_CONTRACT, srt_classes()), ("diffusion", DIFFUSION_CONTRACT, diffusion_classes())]


def test_checked_in_document_is_the_generated_one():
    assert DOC.read_text() == render_document(), "regenerate: python -m sglang.cli.plugins.contract_doc > docs/plugin_contract.md"


@pytest.mark.parametrize(("runtime", "table", "classes"), TABLES, ids=[t[0] for t in TABLES])
def test_every_public_member_is_in_the_table_once(runtime, table, classes):
    names = [it.name for it in table]
    assert len(names) == len(set(names))
    assert set(names) == set(public_members(classes))


@pytest.mark.parametrize(("runtime", "table", "classes"), TABLES, ids=[t[0] for t in TABLES])
def test_statuses_and_callers_are_consistent(runtime, table, classes):
    for it in table:
        assert it.status in ("Active", "Planned", "Compatibility", "Identity")
        assert bool(it.called_by) == (it.status in ("Active", "Compatibility")), it


CALLS = [(rt, it.name, mod) for rt, table, _ in TABLES for it in table for mod in it.called_by]


@pytest.mark.parametrize(("runtime", "name", "module"), CALLS, ids=[f"{r}:{n}@{m.rsplit('.', 1)[-1]}" for r, n, m in CALLS])
def test_each_named_caller_really_calls_the_member(runtime, name, module):
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin, module
    source = Path(spec.origin).read_text()
    uses = (f".{name}(", f".{name}\n", f".{name})", f"self.{name}", f".{name}.")  # a call, or an attribute read
    assert any(u in source for u in uses), f"{module} does not call {name}"
