"""Target forms and what they resolve to: functions, methods, classes, async."""

from __future__ import annotations

import asyncio
import inspect

from sglang.plugin_core.errors import HookApplyError, HookTargetError
from sglang.srt.plugins.hook_registry import HookType


def _around_tag(tag):
    def around(original_fn, *args, **kwargs):
        return (tag, original_fn(*args, **kwargs))

    return around


def test_entry_point_form_for_a_function(registry, target_module):
    registry.register(f"{target_module.__name__}:add", _around_tag("ep"), HookType.AROUND)
    registry.apply_hooks()
    assert target_module.add(1) == ("ep", 2)


def test_entry_point_form_for_a_method(registry, target_module):
    registry.register(f"{target_module.__name__}:Base.meth", _around_tag("ep"), HookType.AROUND)
    registry.apply_hooks()
    assert target_module.Base(3).meth(4) == ("ep", (3, 4))


def test_both_spellings_name_the_same_target(registry, target_module):
    registry.register(f"{target_module.__name__}:add", _around_tag("a"), HookType.AROUND)
    registry.register(f"{target_module.__name__}.add", _around_tag("b"), HookType.AROUND)
    registry.apply_hooks()
    assert target_module.add(1) == ("b", ("a", 2))  # one target: the last registered AROUND is outermost


def test_instance_method_keeps_binding(registry, target_module):
    seen = []
    registry.register(f"{target_module.__name__}.Base.meth", lambda self, x: seen.append((type(self).__name__, x)), HookType.BEFORE)
    registry.apply_hooks()
    assert target_module.Base(1).meth(2) == (1, 2)
    assert seen == [("Base", 2)]


def test_classmethod_keeps_binding(registry, target_module):
    seen = []
    registry.register(f"{target_module.__name__}.Base.make", lambda cls, v: seen.append(cls.__name__), HookType.BEFORE)
    registry.apply_hooks()
    obj = target_module.Base.make(5)
    assert obj.v == 5 and seen == ["Base"]


def test_inherited_classmethod_on_subclass_target_gets_the_subclass(registry, target_module):
    seen = []
    registry.register(f"{target_module.__name__}.Child.make", lambda cls, v: seen.append(cls.__name__), HookType.BEFORE)
    registry.apply_hooks()
    assert type(target_module.Child.make(1)) is target_module.Child
    assert target_module.Base.make(1).v == 1  # the base class is not hooked
    assert seen == ["Child"]


def test_staticmethod_and_inherited_staticmethod(registry, target_module):
    registry.register(f"{target_module.__name__}.Child.static", _around_tag("s"), HookType.AROUND)
    registry.apply_hooks()
    assert target_module.Child.static(1) == ("s", 101)
    assert target_module.Child().static(1) == ("s", 101)
    assert target_module.Base.static(1) == 101


def test_inherited_method_patch_is_removed_on_restore(registry, target_module):
    registry.register(f"{target_module.__name__}.Child.meth", _around_tag("c"), HookType.AROUND)
    registry.apply_hooks()
    assert "meth" in target_module.Child.__dict__
    registry.restore()
    assert "meth" not in target_module.Child.__dict__
    assert target_module.Child(1).meth(2) == (1, 2)


def test_property_getter_is_hooked(registry, target_module):
    registry.register(f"{target_module.__name__}.Base.prop", lambda result, self: result + 1, HookType.AFTER)
    registry.apply_hooks()
    assert isinstance(inspect.getattr_static(target_module.Base, "prop"), property)
    assert target_module.Base(2).prop == 21


def test_async_target_gets_an_async_wrapper(registry, target_module):
    async def around(original_fn, x):
        return ("async", await original_fn(x))

    registry.register(f"{target_module.__name__}.fetch", lambda x: ((x + 1,), {}), HookType.BEFORE)
    registry.register(f"{target_module.__name__}.fetch", around, HookType.AROUND)
    registry.register(f"{target_module.__name__}.fetch", lambda result, x: result, HookType.AFTER)
    registry.apply_hooks()
    assert inspect.iscoroutinefunction(target_module.fetch)
    assert asyncio.run(target_module.fetch(1)) == ("async", 4)


def test_sync_around_on_async_target_is_awaited(registry, target_module):
    registry.register(f"{target_module.__name__}.fetch", lambda original_fn, x: original_fn(x), HookType.AROUND)
    registry.apply_hooks()
    assert asyncio.run(target_module.fetch(3)) == 6


def test_async_hook_on_sync_target_fails_naming_the_target(registry, target_module):
    async def before(*a, **k):
        return None

    registry.register(f"{target_module.__name__}.add", before, HookType.BEFORE)
    failures = registry.apply_hooks(on_failure=lambda f: None)
    assert len(failures) == 1 and isinstance(failures[0].error, HookApplyError)
    assert "cannot wrap the synchronous target" in str(failures[0].error)


def test_around_on_a_class_target_is_refused_at_apply(registry, target_module):
    registry.register(f"{target_module.__name__}.Base", lambda o, *a, **k: o(*a, **k), HookType.AROUND)
    failures = registry.apply_hooks(on_failure=lambda f: None)
    assert "is a class" in str(failures[0].error)
    assert f"'{target_module.__name__}.Base.__init__'" in str(failures[0].error)
    assert isinstance(target_module.Base, type)


def test_missing_attribute_names_target_and_plugin(registry, target_module):
    registry.register(f"{target_module.__name__}.Base.nope", _around_tag("x"), HookType.AROUND)
    failures = registry.apply_hooks(on_failure=lambda f: None)
    err = failures[0].error
    assert isinstance(err, HookTargetError)
    assert f"hook target '{target_module.__name__}.Base.nope'" in str(err)
    assert "has no attribute 'nope'" in str(err) and "(registered outside a plugin)" in str(err)


def test_missing_module_is_reported(registry):
    registry.register("no_such_pkg_xyz.mod.f", _around_tag("x"), HookType.AROUND)
    failures = registry.apply_hooks(on_failure=lambda f: None)
    assert "module 'no_such_pkg_xyz' is not installed" in str(failures[0].error)


def test_target_naming_a_module_is_refused(registry):
    registry.register("json.decoder", _around_tag("x"), HookType.AROUND)
    failures = registry.apply_hooks(on_failure=lambda f: None)
    assert "names a module" in str(failures[0].error)


def test_submodule_prefix_is_imported(registry):
    import importlib

    registry.register("json.decoder.JSONDecoder.decode", lambda self, s, *a, **k: None, HookType.BEFORE)
    registry.apply_hooks()
    assert importlib.import_module("json").loads("[1]") == [1]
    assert "json.decoder.JSONDecoder.decode" in registry.applied_targets()


def test_metadata_signature_and_wrapped_stay_those_of_the_original(registry, target_module):
    original = target_module.add
    registry.register(f"{target_module.__name__}.add", lambda *a, **k: None, HookType.BEFORE)
    registry.apply_hooks()
    wrapped = target_module.add
    assert wrapped is not original
    assert wrapped.__wrapped__ is original
    assert wrapped.__name__ == "add" and wrapped.__doc__ == "Add two numbers."
    assert inspect.signature(wrapped) == inspect.signature(original)


def test_unhooked_targets_are_untouched(registry, target_module):
    original = target_module.add
    registry.register(f"{target_module.__name__}.returns_none", _around_tag("x"), HookType.AROUND)
    registry.apply_hooks()
    assert target_module.add is original
    assert registry.applied_targets() == [f"{target_module.__name__}.returns_none"]

