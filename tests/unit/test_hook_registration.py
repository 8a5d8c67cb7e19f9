"""Registration-time validation: loud, before any target is imported."""

from __future__ import annotations

import pytest

from sglang.plugin_core.errors import HookRegistrationError, HookTargetError
from sglang.srt.plugins.hook_registry import HookType, plugin_hook


class Widget:
    pass


@pytest.mark.parametrize("htype", [HookType.BEFORE, HookType.AFTER, HookType.AROUND])
def test_class_with_non_replace_type_is_a_type_error(registry, htype):
    with pytest.raises(TypeError, match=r"only HookType.REPLACE accepts a class.*'pkg.mod.Thing.__init__'"):
        registry.register("pkg.mod.Thing", Widget, htype)


def test_class_decorator_with_around_is_a_type_error(registry):
    with pytest.raises(HookRegistrationError):
        plugin_hook("pkg.mod.Thing", type=HookType.AROUND)(Widget)


def test_unknown_hook_type_names_the_valid_ones(registry):
    with pytest.raises(HookRegistrationError, match=r"unknown hook type 'sideways'.*BEFORE, AFTER, AROUND, REPLACE"):
        registry.register("pkg.mod.f", lambda: None, "sideways")


def test_non_callable_hook_is_rejected(registry):
    with pytest.raises(HookRegistrationError, match="must be callable"):
        registry.register("pkg.mod.f", 42, HookType.BEFORE)


def test_around_without_a_positional_parameter_is_rejected(registry):
    def around(**kwargs):
        return None

    with pytest.raises(HookRegistrationError, match="its first parameter receives original_fn"):
        registry.register("pkg.mod.f", around, HookType.AROUND)


def test_dotless_target_fails_at_registration(registry):
    with pytest.raises(HookTargetError, match=r"has no module: name it fully, e.g. 'pkg.mod.f'"):
        registry.register("f", lambda *a: None, HookType.BEFORE)


@pytest.mark.parametrize("target", ["pkg.mod::f", ":f", "pkg.mod:", "pkg..f", "pkg.mod.1f", ""])
def test_malformed_target_fails_at_registration(registry, target):
    with pytest.raises(HookTargetError, match="hook target"):
        registry.register(target, lambda *a: None, HookType.BEFORE)


def test_registration_names_the_plugin_in_errors(registry):
    from sglang.srt.plugins.hook_registry import PluginSource, _current_plugin_source

    token = _current_plugin_source.set(PluginSource("acme", "acme-dist", "1.0"))
    try:
        with pytest.raises(HookTargetError, match=r"from plugin acme \(acme-dist\)"):
            registry.register("nodots", lambda *a: None, HookType.BEFORE)
    finally:
        _current_plugin_source.reset(token)


def test_plugin_hook_returns_the_function_unchanged(registry):
    def f(*a, **k):
        return None

    assert plugin_hook("pkg.mod.g", type=HookType.BEFORE)(f) is f


def test_registering_as_attributes_hooks_and_resolve_walks_a_target(registry, target_module):
    from sglang.plugin_core.errors import HookTargetError
    from sglang.plugin_core.hooks.types import PluginSource

    src = PluginSource("kit", "kit-dist")
    with registry.registering_as(src):
        registry.register(f"{target_module.__name__}.add", lambda *a, **k: None, "before")
    registry.register(f"{target_module.__name__}.add", lambda *a, **k: None, "before")  # outside: a direct registration
    sources = [s.source for s in registry.registered(f"{target_module.__name__}.add")]
    assert sources[0] == src and sources[1] is None
    res = registry.resolve(f"{target_module.__name__}.Base.meth")
    assert res.owner is target_module.Base and res.name == "meth"
    with pytest.raises(HookTargetError, match=r"from plugin kit: class .*Base' has no attribute 'nope'"):
        registry.resolve(f"{target_module.__name__}.Base.nope", "plugin kit")
