"""Call-time hook faults: the raising hook is named, the exception is unchanged, the target is not blamed for itself."""

from __future__ import annotations

import pytest

from sglang.plugin_core.hooks.faults import describe_fault, fail_fast, hook_of
from sglang.plugin_core.hooks.types import PluginSource
from sglang.srt.plugins.hook_registry import HookType


class Boom(ValueError):
    pass


def _raise(*a, **k):
    raise Boom("hook went wrong")


def _register_as(registry, source: PluginSource, target: str, fn, htype: HookType) -> None:
    with registry.registering_as(source):
        registry.register(target, fn, htype)


@pytest.mark.parametrize("htype", [HookType.BEFORE, HookType.AFTER, HookType.AROUND, HookType.REPLACE])
def test_an_exception_leaving_a_hook_is_attributed_to_it_and_re_raised_unchanged(registry, target_module, htype):
    src = PluginSource("acme", "acme-dist", "1.0")
    _register_as(registry, src, f"{target_module.__name__}.add", _raise, htype)
    registry.apply_hooks()
    with pytest.raises(Boom, match="hook went wrong") as info:
        target_module.add(1, 2)
    spec = hook_of(info.value)
    assert spec is not None and spec.source == src and spec.type is htype
    text = describe_fault(info.value)
    assert "Boom: hook went wrong" in text and "plugin acme" in text and "distribution acme-dist" in text
    assert f"on target {target_module.__name__}.add" in text and "_raise" in text
    [count] = registry.call_failures()
    assert count["plugin"] == "acme" and count["count"] == 1 and count["target"] == f"{target_module.__name__}.add"


def test_the_targets_own_exception_passing_through_an_around_hook_is_not_blamed_on_it(registry, target_module):
    registry.register(f"{target_module.__name__}.add", lambda original, *a, **k: original(*a, **k), HookType.AROUND)
    registry.register(f"{target_module.__name__}.add", lambda result, *a, **k: None, HookType.AFTER)
    registry.apply_hooks()
    with pytest.raises(TypeError) as info:
        target_module.add("text", 1)  # str + int: the target itself raises
    assert hook_of(info.value) is None
    assert describe_fault(info.value).startswith("TypeError: ")
    assert registry.call_failures() == []


def test_an_inner_hook_is_blamed_not_the_around_hook_that_let_it_through(registry, target_module):
    inner = PluginSource("inner", "inner-dist")
    registry.register(f"{target_module.__name__}.add", lambda original, *a, **k: original(*a, **k), HookType.AROUND)
    _register_as(registry, inner, f"{target_module.__name__}.add", _raise, HookType.BEFORE)
    registry.apply_hooks()
    with pytest.raises(Boom) as info:
        target_module.add(1)
    assert hook_of(info.value).source == inner


def test_an_around_hook_raising_its_own_error_is_blamed(registry, target_module):
    def around(original, *a, **k):
        original(*a, **k)
        raise RuntimeError("after the call")

    registry.register(f"{target_module.__name__}.add", around, HookType.AROUND)
    registry.apply_hooks()
    with pytest.raises(RuntimeError) as info:
        target_module.add(1)
    assert hook_of(info.value).fn is around


def test_async_hooks_are_attributed_too(registry, target_module):
    import asyncio

    async def bad_after(result, *a, **k):
        raise Boom("async")

    registry.register(f"{target_module.__name__}.fetch", bad_after, HookType.AFTER)
    registry.apply_hooks()
    with pytest.raises(Boom) as info:
        asyncio.run(target_module.fetch(2))
    assert hook_of(info.value).fn is bad_after


def test_failures_are_counted_per_hook_and_forgotten_on_reset(registry, target_module):
    registry.register(f"{target_module.__name__}.add", _raise, HookType.BEFORE)
    registry.apply_hooks()
    for _ in range(3):
        with pytest.raises(Boom):
            target_module.add(1)
    assert [f["count"] for f in registry.call_failures()] == [3]
    registry.reset()
    assert registry.call_failures() == []


def test_strict_mode_fails_fast_only_on_hook_faults(registry, target_module, monkeypatch):
    registry.register(f"{target_module.__name__}.add", _raise, HookType.BEFORE)
    registry.apply_hooks()
    with pytest.raises(Boom) as info:
        target_module.add(1)
    assert not fail_fast(info.value)
    monkeypatch.setenv("SGLANG_PLUGINS_STRICT", "1")
    assert fail_fast(info.value)
    assert not fail_fast(ValueError("not from a hook"))


def test_a_hooked_target_that_succeeds_is_unchanged(registry, target_module):
    registry.register(f"{target_module.__name__}.add", lambda *a, **k: None, HookType.BEFORE)
    registry.register(f"{target_module.__name__}.add", lambda result, *a, **k: result * 2, HookType.AFTER)
    registry.apply_hooks()
    assert target_module.add(1, 2) == 6 and registry.call_failures() == []


@pytest.mark.parametrize("catch_and_reraise", [False, True])
def test_an_around_hook_alone_is_not_blamed_for_the_target_it_wraps(registry, target_module, catch_and_reraise):
    def around(original, *a, **k):
        if not catch_and_reraise:
            return original(*a, **k)
        try:
            return original(*a, **k)
        except TypeError:
            raise

    registry.register(f"{target_module.__name__}.add", around, HookType.AROUND)
    registry.apply_hooks()
    with pytest.raises(TypeError) as info:
        target_module.add("text", 1)
    assert hook_of(info.value) is None and registry.call_failures() == []
