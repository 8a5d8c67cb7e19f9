"""``sglang.testing.plugins``: the fixture and the context manager plugin authors use."""

from __future__ import annotations

import importlib

import pytest

from sglang.testing.plugins import restored_hooks


def test_restored_hooks_undoes_patches_of_both_runtimes(tmp_path, monkeypatch):
    (tmp_path / "rh_target.py").write_text("def f():\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = importlib.import_module("rh_target")
    from sglang.multimodal_gen.runtime.platforms.plugins import HookRegistry as D
    from sglang.srt.plugins.hook_registry import HookRegistry as S

    with restored_hooks():
        S.register("rh_target.f", lambda result: result + 10, "after")
        S.apply_hooks()
        D.register("rh_target.f", lambda result: result + 100, "after")
        D.apply_hooks()
        assert mod.f() == 111
    assert mod.f() == 1
    assert S.registered("rh_target.f") == [] and D.registered("rh_target.f") == []


def test_restored_hooks_restores_even_when_the_body_raises(tmp_path, monkeypatch):
    (tmp_path / "rh_target2.py").write_text("def g():\n    return 'orig'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = importlib.import_module("rh_target2")
    from sglang.srt.plugins.hook_registry import HookRegistry as S

    with pytest.raises(RuntimeError), restored_hooks():
        S.register("rh_target2.g", lambda *a: "hooked", "replace")
        S.apply_hooks()
        assert mod.g() == "hooked"
        raise RuntimeError("test body failed")
    assert mod.g() == "orig"
