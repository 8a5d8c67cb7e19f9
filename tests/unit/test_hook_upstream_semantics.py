"""The hook API as upstream SGLang defines it: code written for upstream's registry runs unchanged.

Each test name states the upstream rule it checks. Where this project is
stronger (late registrations are composed), ``docs/plugins.md`` says so.
"""

from __future__ import annotations

import logging
import sys
import textwrap

import pytest

from sglang.plugin_core.errors import HookTargetError, PluginLoadError
from sglang.srt.plugins.hook_registry import HookSource, HookType, plugin_hook

LOGGER = "sglang.srt.plugins.hook_registry"


def test_register_without_a_type_registers_an_after_hook(registry, target_module):
    t = f"{target_module.__name__}.add"
    seen = []
    registry.register(t, lambda result, *a, **k: seen.append(result))
    registry.apply_hooks()
    assert target_module.add(1) == 2 and seen == [2]
    assert [s.type for s in registry.registered(t)] == [HookType.AFTER]


def test_plugin_hook_without_a_type_registers_an_after_hook(registry, target_module):
    t = f"{target_module.__name__}.add"

    @plugin_hook(t)
    def doubled(result, *args, **kwargs):
        return result * 2

    registry.apply_hooks()
    assert target_module.add(1) == 4
    assert registry.is_hook_applied(t, doubled, HookType.AFTER)


@pytest.mark.parametrize(
    "call",
    [
        lambda r, t, fn: r.register(t, fn, HookType.AROUND),  # third positional argument
        lambda r, t, fn: r.register(t, fn, hook_type=HookType.AROUND),  # register's keyword
        lambda r, t, fn: r.register(t, fn, type=HookType.AROUND),  # plugin_hook's keyword, accepted too
        lambda r, t, fn: plugin_hook(t, type=HookType.AROUND)(fn),
        lambda r, t, fn: plugin_hook(t, hook_type="around")(fn),
        lambda r, t, fn: plugin_hook(t, HookType.AROUND)(fn),
    ],
    ids=["positional", "register-hook_type", "register-type", "plugin_hook-type", "plugin_hook-hook_type", "plugin_hook-positional"],
)
def test_the_type_is_given_by_either_spelling(registry, target_module, call):
    t = f"{target_module.__name__}.add"

    def around(original_fn, *a, **k):
        return ("around", original_fn(*a, **k))

    call(registry, t, around)
    registry.apply_hooks()
    assert target_module.add(1) == ("around", 2)
    assert registry.is_hook_applied(t, around, HookType.AROUND)


def test_is_hook_applied_is_true_only_for_that_callable_on_that_target_with_that_type(registry, target_module):
    t = f"{target_module.__name__}.add"
    hook = lambda result, *a, **k: None  # noqa: E731
    twin = lambda result, *a, **k: None  # noqa: E731  equal-looking, another object
    registry.register(t, hook)
    assert not registry.is_hook_applied(t, hook)  # before apply_hooks()
    registry.apply_hooks()
    assert registry.is_hook_applied(t, hook)
    assert registry.is_hook_applied(t, hook, HookType.AFTER)
    assert not registry.is_hook_applied(t, hook, HookType.BEFORE)
    assert not registry.is_hook_applied(t, twin)
    assert not registry.is_hook_applied(f"{target_module.__name__}.returns_none", hook)
    registry.reset()
    assert not registry.is_hook_applied(t, hook)


def test_is_hook_applied_is_false_for_a_target_that_failed_to_resolve(registry, target_module):
    hook = lambda *a, **k: None  # noqa: E731
    registry.register(f"{target_module.__name__}.nothing_here", hook, HookType.BEFORE)
    registry.apply_hooks()
    assert not registry.is_hook_applied(f"{target_module.__name__}.nothing_here", hook)


def test_an_unresolved_target_logs_an_error_and_stays_pending_until_it_exists(registry, target_module, tmp_path, caplog):
    late = f"late_module_{target_module.__name__}"
    seen = []
    with registry.registering_as(HookSource("acme", "acme-dist")):
        hook = registry.register(f"{late}.compute", lambda result, *a, **k: seen.append(result))
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        failures = registry.apply_hooks()  # no exception
    assert [f.target for f in failures] == [f"{late}.compute"]
    errors = [r for r in caplog.records if r.name == LOGGER and r.levelno == logging.ERROR]
    assert errors and f"{late}.compute" in errors[0].getMessage() and "plugin acme (acme-dist)" in errors[0].getMessage()
    assert [(s.fn, s.source) for s, _ in registry.pending()] == [(hook, HookSource("acme", "acme-dist"))]

    (tmp_path / f"{late}.py").write_text(textwrap.dedent("""
        def compute(x):
            return x * 3
    """))
    sys.path.insert(0, str(tmp_path))
    try:
        registry.apply_hooks()  # the module imports now
        module = sys.modules[late]
        assert module.compute(2) == 6 and seen == [6]
        assert registry.pending() == [] and registry.is_hook_applied(f"{late}.compute", hook)
    finally:
        sys.path.remove(str(tmp_path))
        registry.reset()
        sys.modules.pop(late, None)


def test_an_attribute_set_later_is_hooked_by_a_later_apply(registry, target_module):
    t = f"{target_module.__name__}.Base.later"
    hook = registry.register(t, lambda original_fn, self: ("hooked", original_fn(self)), HookType.AROUND)
    registry.apply_hooks()
    target_module.Base.later = lambda self: "late"
    registry.apply_hooks()
    assert target_module.Base().later() == ("hooked", "late")
    assert registry.is_hook_applied(t, hook, "around")


def test_strict_mode_makes_a_pending_target_a_start_up_error(registry, target_module, monkeypatch):
    monkeypatch.setenv("SGLANG_PLUGINS_STRICT", "1")
    registry.register(f"{target_module.__name__}.nothing_here", lambda *a, **k: None, HookType.BEFORE)
    registry.register(f"{target_module.__name__}.add", lambda *a, **k: None, HookType.BEFORE)
    with pytest.raises(PluginLoadError, match="nothing_here.*SGLANG_PLUGINS_STRICT=1"):
        registry.apply_hooks()
    assert registry.applied_targets() == []  # nothing half-applied


@pytest.mark.parametrize("target", ["nodots", "pkg..mod", "pkg.mod.9bad", ""])
def test_malformed_targets_are_still_rejected_at_registration(registry, target):
    with pytest.raises(HookTargetError):
        registry.register(target, lambda *a, **k: None)


def test_class_replace_plus_a_method_hook_warns_that_it_will_override(registry, target_module, caplog):
    Base = target_module.Base

    class Swapped(Base):
        pass

    def meth_hook(result, *a, **k):
        return result

    with registry.registering_as(HookSource("swapper", "swap-dist")):
        registry.register(f"{target_module.__name__}.Base", Swapped, HookType.REPLACE)
    with registry.registering_as(HookSource("tracer", "trace-dist")):
        registry.register(f"{target_module.__name__}.Base.meth", meth_hook)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        registry.apply_hooks()
    warnings = [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "will override" in warnings[0]
    assert "Swapped" in warnings[0] and "swapper (swap-dist)" in warnings[0]
    assert "meth_hook" in warnings[0] and "tracer (trace-dist)" in warnings[0]
    registry.apply_hooks()  # said once, not at every apply
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1


def test_hook_source_is_a_value_and_every_hook_carries_one(registry, target_module):
    assert HookSource("p", "d") == HookSource("p", "d") and HookSource("p", "d") != HookSource("p", "e")
    assert HookSource("p", "d") == HookSource("p", "d", "1.0")  # the version is not part of the identity
    assert tuple(HookSource("p", "d")) == ("p", "d") and HookSource("p").dist_name is None
    t = f"{target_module.__name__}.add"
    with registry.registering_as(HookSource("p", "d")):
        registry.register(t, lambda result, *a, **k: None)
    registry.register(t, lambda result, *a, **k: None)
    registry.register(t, lambda result, *a, **k: None, source=HookSource("explicit", "x-dist"))
    assert [s.source for s in registry.registered(t)] == [HookSource("p", "d"), None, HookSource("explicit", "x-dist")]


def test_registry_generation_changes_when_patches_change(registry, target_module):
    g0 = registry.generation()
    registry.register(f"{target_module.__name__}.add", lambda result, *a, **k: None)
    registry.apply_hooks()
    g1 = registry.generation()
    registry.apply_hooks()  # nothing changed
    assert registry.generation() == g1 != g0
    registry.restore()
    assert registry.generation() != g1

