"""Every branch of the SRT selection chain, in fresh interpreters with real dists."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.dists import clean_env, failed, make_dist, ok, run_python

PRINT = """
import sys
from sglang.srt.platforms import current_platform, get_platform_decision
d = get_platform_decision()
print(type(current_platform).__name__, d.rule, d.entry_point, d.dist, sep="|")
print("imported:", sorted(m for m in sys.modules if m.startswith("vendor_")))
"""


def vendor(root: Path, name: str, *, available: bool | str = True, cls: str = "Plat", body: str = "", ep_name: str | None = None) -> Path:
    """A platform plugin distribution ``vendor-<name>`` with package ``vendor_<name>``."""
    pkg = f"vendor_{name}"
    if available is True:
        ret = f"'{pkg}.platform.{cls}'"
    elif available is False:
        ret = "None"
    else:
        ret = available
    return make_dist(
        root,
        f"vendor-{name}",
        entry_points={"sglang.srt.platforms": {ep_name or name: f"{pkg}:activate"}},
        files={
            f"{pkg}/__init__.py": f"def activate():\n    {body or 'pass'}\n    return {ret}\n",
            f"{pkg}/platform.py": (
                "from sglang.srt.platforms.interface import SRTPlatform\n"
                "from sglang.srt.platforms.device_mixin import PlatformEnum\n"
                f"class {cls}(SRTPlatform):\n    _enum = PlatformEnum.OOT\n    device_name = '{name}'\n"
                "class NotAPlatform:\n    pass\n"
            ),
        },
    )


def test_explicit_selects_the_named_plugin_and_imports_no_other(tmp_path):
    vendor(tmp_path, "a")
    vendor(tmp_path, "b")
    out = ok(run_python(PRINT, [tmp_path], clean_env(SGLANG_PLATFORM="b")))
    assert "Plat|explicit: SGLANG_PLATFORM=b|b|vendor-b" in out
    assert "imported: ['vendor_b', 'vendor_b.platform']" in out


def test_explicit_unknown_name_lists_available_and_the_fix(tmp_path):
    vendor(tmp_path, "a")
    vendor(tmp_path, "b")
    err = failed(run_python(PRINT, [tmp_path], clean_env(SGLANG_PLATFORM="zzz")))
    assert "RuntimeError" in err or "PlatformSelectionError" in err
    assert "SGLANG_PLATFORM='zzz' matches no installed platform plugin" in err
    assert "available: a, b" in err and "pip install" in err


def test_explicit_activate_none_is_hardware_unavailable(tmp_path):
    vendor(tmp_path, "a", available=False)
    err = failed(run_python(PRINT, [tmp_path], clean_env(SGLANG_PLATFORM="a")))
    assert "reports its hardware is not available (activate() returned None)" in err


def test_explicit_ignores_the_plugins_allow_list(tmp_path):
    vendor(tmp_path, "a")
    out = ok(run_python(PRINT, [tmp_path], clean_env(SGLANG_PLATFORM="a", SGLANG_PLUGINS="other")))
    assert "Plat|explicit: SGLANG_PLATFORM=a|a|vendor-a" in out


def test_auto_zero_active_with_cpu_engine_env_is_cpu(tmp_path):
    vendor(tmp_path, "a", available=False)
    out = ok(run_python(PRINT, [tmp_path], clean_env(SGLANG_USE_CPU_ENGINE="1")))
    assert "CpuSRTPlatform|fallback: SGLANG_USE_CPU_ENGINE=1|None|None" in out


def test_auto_zero_active_without_accelerator_is_the_base_platform(tmp_path):
    vendor(tmp_path, "a", available=False)
    out = ok(run_python(PRINT, [tmp_path]))
    assert out.startswith("SRTPlatform|fallback: no platform plugin active and no accelerator found")


def test_auto_one_active_is_used(tmp_path):
    vendor(tmp_path, "a", available=False)
    vendor(tmp_path, "b")
    out = ok(run_python(PRINT, [tmp_path]))
    assert "Plat|auto: exactly one platform plugin active|b|vendor-b" in out


def test_auto_several_active_asks_for_sglang_platform(tmp_path):
    vendor(tmp_path, "a")
    vendor(tmp_path, "b")
    err = failed(run_python(PRINT, [tmp_path]))
    assert "2 platform plugins are active: a (vendor-a), b (vendor-b)" in err
    assert "SGLANG_PLATFORM=<name>" in err


def test_allow_list_filters_auto_discovery_before_import(tmp_path):
    vendor(tmp_path, "a")
    vendor(tmp_path, "b")
    out = ok(run_python(PRINT, [tmp_path], clean_env(SGLANG_PLUGINS=" b , ,")))
    assert "Plat|auto: exactly one platform plugin active|b|vendor-b" in out
    assert "vendor_a" not in out


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"body": "raise OSError('driver missing')"}, "activate() of platform entry point 'a' (vendor_a:activate) from vendor-a 0.1.0 raised OSError: driver missing"),
        ({"available": "42"}, "returned int 42; it must return the platform class's qualified name as a string"),
        ({"available": "'vendor_a.platform.Missing'"}, "platform class 'vendor_a.platform.Missing' named by entry point 'a'"),
        ({"available": "'no_such_mod.Plat'"}, "does not import: ModuleNotFoundError"),
    ],
)
def test_broken_plugin_aborts_and_never_falls_back(tmp_path, kwargs, message):
    vendor(tmp_path, "a", **kwargs)
    err = failed(run_python(PRINT, [tmp_path], clean_env(SGLANG_USE_CPU_ENGINE="1")))
    assert message in err
    assert "CpuSRTPlatform" not in err


def test_plugin_that_fails_to_import_names_entry_point_and_dist(tmp_path):
    vendor(tmp_path, "a")
    (tmp_path / "vendor_a" / "__init__.py").write_text("raise ImportError('vendor sdk missing')\n")
    err = failed(run_python(PRINT, [tmp_path], clean_env(SGLANG_PLATFORM="a")))
    assert "platform entry point 'a' (vendor_a:activate) from vendor-a 0.1.0 failed to import: ImportError: vendor sdk missing" in err


def test_non_platform_class_is_a_type_error(tmp_path):
    vendor(tmp_path, "a", available="'vendor_a.platform.NotAPlatform'")
    code = """
    try:
        from sglang.srt.platforms import current_platform
    except TypeError as e:
        print("TypeError:", e)
    """
    out = ok(run_python(code, [tmp_path]))
    assert "TypeError: 'vendor_a.platform.NotAPlatform' named by entry point 'a'" in out
    assert "is not a subclass of sglang.srt.platforms.interface.SRTPlatform" in out


def test_colon_qualname_is_accepted(tmp_path):
    vendor(tmp_path, "a", available="'vendor_a.platform:Plat'")
    out = ok(run_python(PRINT, [tmp_path]))
    assert out.startswith("Plat|auto: exactly one platform plugin active|a|vendor-a")


def test_resolution_is_once_per_process_and_thread_safe(tmp_path):
    vendor(tmp_path, "a", body="import time, vendor_a as m; m.CALLS = getattr(m, 'CALLS', 0) + 1; time.sleep(0.2)")
    code = """
    import threading
    import sglang.srt.platforms as P
    got = []
    threads = [threading.Thread(target=lambda: got.append(P.current_platform)) for _ in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    import vendor_a
    print(vendor_a.CALLS, len(got), len({id(g) for g in got}))
    """
    assert ok(run_python(code, [tmp_path])).split() == ["1", "8", "1"]


def test_failure_is_recorded_and_reraised_on_later_access(tmp_path):
    vendor(tmp_path, "a", body="import vendor_a as m; m.CALLS = getattr(m, 'CALLS', 0) + 1; raise ValueError('boom')")
    code = """
    import sglang.srt.platforms as P
    for _ in range(3):
        try:
            P.current_platform
        except Exception as e:
            print(type(e).__name__)
    import vendor_a
    print(vendor_a.CALLS)
    """
    assert ok(run_python(code, [tmp_path])).split() == ["PlatformActivationError"] * 3 + ["1"]


def test_import_sglang_and_platforms_stays_light():
    code = """
    import sys
    import sglang, sglang.srt.platforms, sglang.srt.plugins, sglang.srt.plugins.hook_registry
    print(sorted(m for m in ("torch", "numpy") if m in sys.modules))
    """
    assert ok(run_python(code)).strip() == "[]"
