"""Diffusion hook plugins: two once-per-process phases, failure rules, isolation from SRT."""

from __future__ import annotations

from pathlib import Path

from helpers.dists import clean_env, failed, make_dist, ok, run_python

PLUGINS = "sglang.multimodal_gen.plugins"
PLATFORMS = "sglang.multimodal_gen.platforms"
TARGET_MOD = "dtarget_app"
TARGET = f"{TARGET_MOD}.greet"


def target(root: Path) -> Path:
    """An importable module that records being imported."""
    (root / f"{TARGET_MOD}.py").write_text("import os\nIMPORTED = True\ndef greet(name):\n    return 'hello ' + name\n")
    return root


def hook_plugin(root: Path, name: str, body: str, dist: str | None = None, extra_eps: dict[str, dict[str, str]] | None = None, files: dict[str, str] | None = None) -> Path:
    pkg = f"dplug_{name}"
    eps = {PLUGINS: {name: f"{pkg}:register"}}
    eps.update(extra_eps or {})
    return make_dist(
        root, dist or f"dplug-{name}", entry_points=eps,
        files={f"{pkg}/__init__.py": "from sglang.multimodal_gen.runtime.platforms.plugins import HookType, plugin_hook\n" + body, **(files or {})},
    )


AROUND = f"""
def register():
    @plugin_hook({TARGET!r}, type=HookType.AROUND)
    def shout(original_fn, name):
        return original_fn(name).upper()
"""

RUN = f"""
import sys
from sglang.multimodal_gen.runtime.platforms import plugins as p
p.load_plugins()
print("after load:", {TARGET_MOD!r} in sys.modules, p.HookRegistry.applied_targets())
p.apply_plugin_hooks()
import {TARGET_MOD}
print("after apply:", {TARGET_MOD}.greet("x"))
print("records:", [(r.name, r.status) for r in p.plugin_records()])
"""


def test_load_registers_only_and_apply_patches(tmp_path):
    hook_plugin(target(tmp_path), "a", AROUND)
    out = ok(run_python(RUN, [tmp_path]))
    assert "after load: False []" in out  # registration resolved no target: nothing imported
    assert "after apply: HELLO X" in out
    assert "records: [('a', 'loaded')]" in out


def test_apply_registers_first_when_load_was_not_called(tmp_path):
    hook_plugin(target(tmp_path), "a", AROUND)
    code = f"from sglang.multimodal_gen.runtime.platforms.plugins import apply_plugin_hooks\napply_plugin_hooks()\nimport {TARGET_MOD}\nprint({TARGET_MOD}.greet('y'))"
    assert ok(run_python(code, [tmp_path])).strip() == "HELLO Y"


def test_hooks_registered_with_the_srt_api_never_run_in_diffusion(tmp_path):
    body = f"""
from sglang.srt.plugins.hook_registry import plugin_hook as srt_hook
def register():
    @srt_hook({TARGET!r}, type="around")
    def srt(original_fn, name):
        return "srt ran"
"""
    hook_plugin(target(tmp_path), "a", body)
    assert "after apply: hello x" in ok(run_python(RUN, [tmp_path]))


def test_diffusion_hooks_never_run_in_srt(tmp_path):
    hook_plugin(target(tmp_path), "a", AROUND)
    code = f"""
    from sglang.multimodal_gen.runtime.platforms.plugins import load_plugins
    from sglang.srt.plugins.hook_registry import HookRegistry
    load_plugins()
    HookRegistry.apply_hooks()
    import {TARGET_MOD}
    print({TARGET_MOD}.greet("z"))
    """
    assert ok(run_python(code, [tmp_path], clean_env(SGLANG_USE_CPU_ENGINE="1"))).strip() == "hello z"


def test_a_failing_optional_plugin_loses_all_its_hooks_and_others_continue(tmp_path):
    bad = f"""
def register():
    @plugin_hook({TARGET!r}, type=HookType.AFTER)
    def tag(result, name):
        return result + "!"
    raise RuntimeError("half-way")
"""
    hook_plugin(target(tmp_path), "bad", bad)
    hook_plugin(tmp_path, "good", AROUND)
    out = ok(run_python(RUN, [tmp_path]))
    assert "after apply: HELLO X" in out  # no "!" from the discarded plugin
    assert "('bad', 'failed')" in out and "('good', 'loaded')" in out


def test_an_optional_plugin_whose_target_does_not_exist_stays_pending(tmp_path):
    body = "def register():\n    @plugin_hook('dtarget_app.nope', type='before')\n    def b(*a, **k):\n        return None\n"
    hook_plugin(target(tmp_path), "bad", body)
    hook_plugin(tmp_path, "good", AROUND)
    out = run_python(RUN, [tmp_path])
    assert "after apply: HELLO X" in ok(out)
    assert "hook target 'dtarget_app.nope' of plugin bad (dplug-bad) does not resolve" in out.stderr and "stays pending" in out.stderr


def _platform_dist(root: Path, plugin_body: str) -> Path:
    """A platform distribution that also ships a diffusion hook plugin."""
    plat = (
        "from sglang.multimodal_gen.runtime.platforms import Platform, PlatformEnum\n"
        "class Plat(Platform):\n    _enum = PlatformEnum.OOT\n    device_name = 'vd'\n    device_type = 'vd'\n"
    )
    return hook_plugin(
        root, "vend", plugin_body, dist="vend-dev",
        extra_eps={PLATFORMS: {"vd": "dplug_vend.plat:activate"}},
        files={"dplug_vend/plat.py": "def activate():\n    return 'dplug_vend.plat.Plat'\n" + plat},
    )


def test_a_plugin_of_the_selected_platform_aborts_start_up_when_it_fails(tmp_path):
    _platform_dist(target(tmp_path), "def register():\n    raise RuntimeError('vendor init broke')\n")
    err = failed(run_python(RUN, [tmp_path]))
    assert "PluginLoadError: plugin 'vend' (dplug_vend:register) from vend-dev failed to run its callback: RuntimeError: vendor init broke" in err
    assert "SGLANG_DIFFUSION_PLATFORM_OVERRIDE" in err


def test_a_required_hook_that_cannot_be_applied_aborts_naming_the_target(tmp_path):
    body = "def register():\n    @plugin_hook('dtarget_app.missing', type='around')\n    def h(fn, *a):\n        return fn(*a)\n"
    _platform_dist(target(tmp_path), body)
    err = failed(run_python(RUN, [tmp_path]))
    assert "could not be applied to 'dtarget_app.missing'" in err and "selected platform's distribution" in err


def test_failure_is_terminal_for_the_process(tmp_path):
    _platform_dist(target(tmp_path), "def register():\n    raise RuntimeError('boom')\n")
    code = """
    from sglang.multimodal_gen.runtime.platforms.plugins import apply_plugin_hooks, load_plugins
    for fn in (load_plugins, apply_plugin_hooks):
        try:
            fn()
        except Exception as e:
            print(type(e).__name__, str(e)[:60])
    """
    out = ok(run_python(code, [tmp_path])).splitlines()
    assert out[0].startswith("PluginLoadError")
    assert out[1].startswith("ActivationFailedError diffusion plugin registration (load_plugins) previously")


def test_hooks_of_a_non_selected_platform_distribution_are_skipped(tmp_path):
    _platform_dist(target(tmp_path), "raise RuntimeError('must not be imported')\n")
    out = ok(run_python(RUN, [tmp_path], clean_env(SGLANG_DIFFUSION_PLATFORM_OVERRIDE="cpu")))
    assert "after apply: hello x" in out
    assert "records: [('vend', 'excluded')]" in out


def test_sglang_plugins_filters_before_import(tmp_path):
    hook_plugin(target(tmp_path), "a", "raise RuntimeError('must not be imported')\n")
    hook_plugin(tmp_path, "b", AROUND)
    out = ok(run_python(RUN, [tmp_path], clean_env(SGLANG_PLUGINS="b")))
    assert "after apply: HELLO X" in out and "('a', 'filtered')" in out


def test_sglang_plugins_can_disable_the_selected_platforms_plugins_too(tmp_path):
    _platform_dist(target(tmp_path), "def register():\n    raise RuntimeError('must not run')\n")
    out = ok(run_python(RUN, [tmp_path], clean_env(SGLANG_PLUGINS="other")))
    assert "records: [('vend', 'filtered')]" in out


def test_a_re_entrant_call_from_a_callback_returns_and_the_outer_call_finishes(tmp_path):
    body = f"""
def register():
    from sglang.multimodal_gen.runtime.platforms.plugins import apply_plugin_hooks, load_plugins
    load_plugins()          # re-entrant: returns at once
    @plugin_hook({TARGET!r}, type=HookType.AROUND)
    def shout(original_fn, name):
        return original_fn(name).upper()
"""
    hook_plugin(target(tmp_path), "a", body)
    assert "after apply: HELLO X" in ok(run_python(RUN, [tmp_path]))


def test_other_threads_wait_and_inherit_the_outcome(tmp_path):
    body = f"""
import time
def register():
    time.sleep(0.3)
    @plugin_hook({TARGET!r}, type=HookType.AROUND)
    def shout(original_fn, name):
        return original_fn(name).upper()
"""
    hook_plugin(target(tmp_path), "a", body)
    code = f"""
    import threading
    from sglang.multimodal_gen.runtime.platforms.plugins import apply_plugin_hooks, HookRegistry
    ts = [threading.Thread(target=apply_plugin_hooks) for _ in range(4)]
    [t.start() for t in ts]; [t.join() for t in ts]
    import {TARGET_MOD}
    print({TARGET_MOD}.greet("t"), len(HookRegistry.registered()))
    """
    assert ok(run_python(code, [tmp_path])).strip() == "HELLO T 1"


def test_oot_dispatch_order_registered_then_forward_key_then_forward_oot(tmp_path):
    plat = (
        "from sglang.multimodal_gen.runtime.platforms import Platform, PlatformEnum\n"
        "class Plat(Platform):\n    _enum = PlatformEnum.OOT\n    device_name = 'vd'\n    device_type = 'vd'\n"
        "    def get_dispatch_key_name(self):\n        return 'cuda'\n"
    )
    make_dist(tmp_path, "vend-dev", entry_points={PLATFORMS: {"vd": "vplat:activate"}}, files={"vplat.py": "def activate():\n    return 'vplat.Plat'\n" + plat})
    code = """
    from sglang.multimodal_gen.runtime.layers.custom_op import CustomOp
    class A(CustomOp):
        def forward_native(self, x):
            return "native"
    class B(A):
        def forward_cuda(self, x):
            return "cuda"
    class C(A):
        def forward_oot(self, x):
            return "oot"
    class D(B):
        pass
    CustomOp.register_oot_forward(D, fn=lambda op, x: "registered", platform_key="cuda")
    print(A()(0), B()(0), C()(0), D()(0))
    """
    assert ok(run_python(code, [tmp_path])).strip() == "native cuda oot registered"


def test_strict_mode_makes_an_optional_plugin_failure_abort(tmp_path):
    hook_plugin(target(tmp_path), "bad", "def register():\n    raise RuntimeError('optional but broken')\n")
    err = failed(run_python(RUN, [tmp_path], clean_env(SGLANG_PLUGINS_STRICT="1")))
    assert "failed to run its callback: RuntimeError: optional but broken" in err
    assert "Start-up aborts because SGLANG_PLUGINS_STRICT=1 is set" in err
