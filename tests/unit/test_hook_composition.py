"""Composition order (upstream SGLang's), conflicts, idempotence, late registration, aliases, undo."""

from __future__ import annotations

import sys

import pytest

from sglang.srt.plugins.hook_registry import HookConflictWarning, HookType, PluginSource, _current_plugin_source


def _as(plugin: str, fn):
    token = _current_plugin_source.set(PluginSource(plugin, f"{plugin}-dist", "1.0"))
    try:
        fn()
    finally:
        _current_plugin_source.reset(token)


def _tracer(log, tag, htype):
    if htype is HookType.BEFORE:
        return lambda *a, **k: log.append(f"{tag}:before")
    if htype is HookType.AFTER:
        return lambda result, *a, **k: log.append(f"{tag}:after")

    def around(original_fn, *a, **k):
        log.append(f"{tag}:enter")
        out = original_fn(*a, **k)
        log.append(f"{tag}:exit")
        return out

    return around


def test_befores_run_in_registration_order(registry, target_module):
    log = []
    t = f"{target_module.__name__}.add"
    registry.register(t, _tracer(log, "1", HookType.BEFORE), HookType.BEFORE)
    registry.register(t, _tracer(log, "2", HookType.BEFORE), HookType.BEFORE)
    registry.apply_hooks()
    target_module.add(1)
    assert log == ["1:before", "2:before"]


def test_afters_run_in_registration_order(registry, target_module):
    log = []
    t = f"{target_module.__name__}.add"
    registry.register(t, _tracer(log, "1", HookType.AFTER), HookType.AFTER)
    registry.register(t, _tracer(log, "2", HookType.AFTER), HookType.AFTER)
    registry.apply_hooks()
    target_module.add(1)
    assert log == ["1:after", "2:after"]


def test_last_registered_around_is_outermost(registry, target_module):
    log = []
    t = f"{target_module.__name__}.add"
    for tag in "123":
        registry.register(t, _tracer(log, tag, HookType.AROUND), HookType.AROUND)
    registry.apply_hooks()
    target_module.add(1)
    assert log == ["3:enter", "2:enter", "1:enter", "1:exit", "2:exit", "3:exit"]


def test_mixed_chain_befores_then_arounds_nested_then_afters(registry, target_module):
    log = []
    t = f"{target_module.__name__}.add"
    kinds = [("b1", HookType.BEFORE), ("a1", HookType.AFTER), ("r1", HookType.AROUND), ("b2", HookType.BEFORE), ("a2", HookType.AFTER), ("r2", HookType.AROUND)]
    for tag, htype in kinds:
        registry.register(t, _tracer(log, tag, htype), htype)
    registry.apply_hooks()
    assert target_module.add(1) == 2
    assert log == ["b1:before", "b2:before", "r2:enter", "r1:enter", "r1:exit", "r2:exit", "a1:after", "a2:after"]


def test_registration_order_holds_across_plugins(registry, target_module):
    log = []
    t = f"{target_module.__name__}.add"
    _as("alpha", lambda: registry.register(t, _tracer(log, "alpha-1", HookType.BEFORE), HookType.BEFORE))
    _as("beta", lambda: registry.register(t, _tracer(log, "beta", HookType.BEFORE), HookType.BEFORE))
    _as("alpha", lambda: registry.register(t, _tracer(log, "alpha-2", HookType.BEFORE), HookType.BEFORE))
    registry.apply_hooks()
    target_module.add(1)
    assert log == ["alpha-1:before", "beta:before", "alpha-2:before"]


def test_replace_is_innermost(registry, target_module):
    t = f"{target_module.__name__}.add"
    registry.register(t, lambda original_fn, *a, **k: ("around", original_fn(*a, **k)), HookType.AROUND)
    registry.register(t, lambda a, b=1: "replaced", HookType.REPLACE)
    registry.apply_hooks()
    assert target_module.add(1) == ("around", "replaced")


def test_last_replace_wins_with_a_warning_naming_both(registry, target_module):
    t = f"{target_module.__name__}.add"

    def first(a, b=1):
        return "first"

    def second(a, b=1):
        return "second"

    _as("p1", lambda: registry.register(t, first, HookType.REPLACE))
    _as("p2", lambda: registry.register(t, second, HookType.REPLACE))
    with pytest.warns(HookConflictWarning, match=r"second from plugin p2 \(p2-dist\) wins over .*first from plugin p1 \(p1-dist\)"):
        registry.apply_hooks()
    assert target_module.add(1) == "second"


def test_applying_twice_never_double_wraps(registry, target_module):
    log = []
    registry.register(f"{target_module.__name__}.add", _tracer(log, "x", HookType.BEFORE), HookType.BEFORE)
    registry.apply_hooks()
    wrapped = target_module.add
    registry.apply_hooks()
    assert target_module.add is wrapped
    target_module.add(1)
    assert log == ["x:before"]


def test_hook_registered_after_apply_recomposes_the_target(registry, target_module):
    log = []
    t = f"{target_module.__name__}.add"
    registry.register(t, _tracer(log, "early", HookType.BEFORE), HookType.BEFORE)
    registry.apply_hooks()
    registry.register(t, _tracer(log, "late", HookType.BEFORE), HookType.BEFORE)
    target_module.add(1)
    assert log == ["early:before", "late:before"]
    assert target_module.add.__wrapped__(1) == 2  # still one layer over the original


def test_late_registration_on_a_missing_target_waits_for_it(registry, target_module, caplog):
    t = f"{target_module.__name__}.add"
    registry.register(t, lambda o, *a, **k: o(*a, **k) + 1, HookType.AROUND)
    registry.apply_hooks()
    hook = registry.register(f"{target_module.__name__}.missing", lambda *a: None, HookType.BEFORE)
    assert target_module.add(1) == 3  # the rest keeps working
    assert [s.fn for s, _ in registry.pending()] == [hook]
    assert "pending" in caplog.text and f"{target_module.__name__}.missing" in caplog.text
    target_module.missing = lambda: "late"
    registry.apply_hooks()
    assert registry.pending() == [] and registry.is_hook_applied(f"{target_module.__name__}.missing", hook, HookType.BEFORE)


def test_late_registration_that_cannot_apply_raises_and_keeps_the_rest(registry, target_module):
    t = f"{target_module.__name__}.add"
    registry.register(t, lambda o, *a, **k: o(*a, **k) + 1, HookType.AROUND)
    registry.apply_hooks()
    with pytest.raises(Exception, match="is a class"):
        registry.register(f"{target_module.__name__}.Base", lambda *a: None, HookType.BEFORE)
    assert target_module.add(1) == 3 and isinstance(target_module.Base, type)


def test_stale_from_import_aliases_are_rebound_and_restored(registry, target_module, alias_module):
    original_add, original_base = target_module.add, target_module.Base
    registry.register(f"{target_module.__name__}.add", lambda o, *a, **k: "hooked", HookType.AROUND)

    class NewBase(original_base):
        pass

    registry.register(f"{target_module.__name__}.Base", NewBase, HookType.REPLACE)
    registry.apply_hooks()
    assert alias_module.add(1) == "hooked"
    assert alias_module.Base is NewBase
    registry.restore()
    assert alias_module.add is original_add and target_module.add is original_add
    assert alias_module.Base is original_base and target_module.Base is original_base


def test_method_target_under_a_replaced_class_resolves_through_the_replacement(registry, target_module):
    Base = target_module.Base

    class Replacement(Base):
        pass

    registry.register(f"{target_module.__name__}.Base.meth", lambda o, self, x: ("hooked", o(self, x)), HookType.AROUND)
    registry.register(f"{target_module.__name__}.Base", Replacement, HookType.REPLACE)
    registry.apply_hooks()
    assert target_module.Base(1).meth(2) == ("hooked", (1, 2))
    registry.restore()
    assert target_module.Base is Base and "meth" not in Replacement.__dict__


def test_restore_puts_every_original_back(registry, target_module):
    originals = dict(target_module.__dict__)
    base_dict = dict(target_module.Base.__dict__)
    t = target_module.__name__
    for target in ["add", "fetch", "Base.meth", "Base.make", "Base.static", "Base.prop"]:
        registry.register(f"{t}.{target}", lambda o, *a, **k: o(*a, **k), HookType.AROUND)
    registry.apply_hooks()
    assert target_module.add is not originals["add"]
    registry.restore()
    for key in ("add", "fetch", "Base"):
        assert target_module.__dict__[key] is originals[key]
    assert dict(target_module.Base.__dict__) == base_dict


def test_isolated_scope_undoes_patches_and_registrations(registry, target_module):
    original = target_module.add
    with registry.isolated():
        registry.register(f"{target_module.__name__}.add", lambda o, *a, **k: 0, HookType.AROUND)
        registry.apply_hooks()
        assert target_module.add(1) == 0
    assert target_module.add is original
    assert registry.registered() == []


def test_discard_recomposes_without_the_plugin(registry, target_module):
    t = f"{target_module.__name__}.add"
    _as("keep", lambda: registry.register(t, lambda o, *a, **k: o(*a, **k) + 1, HookType.AROUND))
    _as("drop", lambda: registry.register(t, lambda o, *a, **k: o(*a, **k) * 100, HookType.AROUND))
    registry.apply_hooks()
    assert target_module.add(1) == 300  # drop, registered last, is outermost: (add(1) + 1) * 100
    registry.discard(PluginSource("drop", "drop-dist", "1.0"))
    assert target_module.add(1) == 3


def test_describe_lists_the_chain_in_call_order(registry, target_module):
    t = f"{target_module.__name__}.add"

    def outer(o, *a, **k):
        return o(*a, **k)

    def core(a, b=1):
        return a

    _as("p1", lambda: registry.register(t, outer, HookType.AROUND))
    _as("p2", lambda: registry.register(t, core, HookType.REPLACE))
    registry.apply_hooks()
    chain = registry.describe(t)
    assert [(e.type, e.plugin, e.dist) for e in chain] == [(HookType.AROUND, "p1", "p1-dist"), (HookType.REPLACE, "p2", "p2-dist")]
    assert chain[0].hook.endswith("outer") and chain[1].note == "core"
    assert registry.describe(f"{target_module.__name__}:add") == chain


def test_composed_wrapper_is_one_python_frame(registry, target_module):
    depth = {}

    def depth_here():
        f, n = sys._getframe(), 0
        while f is not None:
            f, n = f.f_back, n + 1
        return n

    t = f"{target_module.__name__}.returns_none"
    registry.register(t, lambda *a, **k: None, HookType.BEFORE)
    registry.register(t, lambda *a, **k: None, HookType.BEFORE)
    registry.register(t, lambda result, *a, **k: None, HookType.AFTER)
    registry.register(t, lambda a=None: depth.setdefault("inner", depth_here()), HookType.REPLACE)
    registry.apply_hooks()
    outer = depth_here()
    target_module.returns_none()
    # this frame -> the composed wrapper (1 frame for 3 hooks) -> the replacement
    assert depth["inner"] == outer + 2


def test_after_sees_the_arguments_the_befores_rewrote(registry, target_module):
    seen = []
    t = f"{target_module.__name__}.add"
    registry.register(t, lambda result, a, b=1: seen.append(("after", a)), HookType.AFTER)
    registry.register(t, lambda a, b=1: ((a + 100,), {"b": b}), HookType.BEFORE)
    registry.apply_hooks()
    assert target_module.add(1) == 102
    assert seen == [("after", 101)]  # as upstream: the BEFORE registered later wraps the AFTER
