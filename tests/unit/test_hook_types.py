"""One hook type per test: BEFORE, AFTER, AROUND, REPLACE."""

from __future__ import annotations

import pytest

from sglang.plugin_core.errors import HookReturnError
from sglang.srt.plugins.hook_registry import NONE_RESULT, HookType, plugin_hook


def test_before_returning_none_keeps_arguments(registry, target_module):
    seen = []
    registry.register(f"{target_module.__name__}.add", lambda *a, **k: seen.append((a, k)), HookType.BEFORE)
    registry.apply_hooks()
    assert target_module.add(2, b=3) == 5
    assert seen == [((2,), {"b": 3})]


def test_before_returning_pair_replaces_arguments(registry, target_module):
    registry.register(f"{target_module.__name__}.add", lambda a, b=1: ((a * 10,), {"b": b}), HookType.BEFORE)
    registry.apply_hooks()
    assert target_module.add(2, b=3) == 23


def test_before_returning_other_value_is_an_error_naming_hook_and_target(registry, target_module):
    def bad_before(*args, **kwargs):
        return [1, 2]

    registry.register(f"{target_module.__name__}.add", bad_before, HookType.BEFORE)
    registry.apply_hooks()
    with pytest.raises(HookReturnError, match=r"bad_before on '.*\.add' returned list.*\(args_tuple, kwargs_dict\)"):
        target_module.add(1)


def test_after_returning_none_keeps_result(registry, target_module):
    registry.register(f"{target_module.__name__}.add", lambda result, *a, **k: None, HookType.AFTER)
    registry.apply_hooks()
    assert target_module.add(1, 2) == 3


def test_after_receives_result_and_arguments_and_replaces_result(registry, target_module):
    registry.register(f"{target_module.__name__}.add", lambda result, a, b=1: (result, a, b), HookType.AFTER)
    registry.apply_hooks()
    assert target_module.add(1, b=2) == (3, 1, 2)


def test_after_can_set_result_to_none_with_sentinel(registry, target_module):
    registry.register(f"{target_module.__name__}.add", lambda result, *a, **k: NONE_RESULT, HookType.AFTER)
    registry.apply_hooks()
    assert target_module.add(1, 2) is None


def test_around_receives_original_and_controls_the_call(registry, target_module):
    @plugin_hook(f"{target_module.__name__}.add", type=HookType.AROUND)
    def around(original_fn, a, b=1):
        return ("wrapped", original_fn(a, b))

    registry.apply_hooks()
    assert target_module.add(1, 2) == ("wrapped", 3)


def test_replace_swaps_a_function(registry, target_module):
    registry.register(f"{target_module.__name__}.add", lambda a, b=1: a - b, HookType.REPLACE)
    registry.apply_hooks()
    assert target_module.add(5, 2) == 3


def test_replace_swaps_a_class_keeping_isinstance_and_issubclass(registry, target_module):
    Base = target_module.Base

    @plugin_hook(f"{target_module.__name__}.Base", type=HookType.REPLACE)
    class Better(Base):
        def meth(self, x):
            return "better"

    registry.apply_hooks()
    obj = target_module.Base(1)
    assert type(obj) is Better
    assert isinstance(obj, Base) and issubclass(target_module.Base, Base)
    assert obj.meth(1) == "better"


def test_string_hook_type_is_accepted_case_insensitively(registry, target_module):
    registry.register(f"{target_module.__name__}.add", lambda o, *a, **k: o(*a, **k) * 2, "Around")
    registry.apply_hooks()
    assert target_module.add(1, 1) == 4
