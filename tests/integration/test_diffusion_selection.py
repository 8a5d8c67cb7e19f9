"""Every branch of the diffusion selection chain, in fresh interpreters with real dists."""

from __future__ import annotations

from pathlib import Path

from helpers.dists import clean_env, failed, make_dist, ok, run_python

GROUP = "sglang.multimodal_gen.platforms"
PRINT = """
import sys
from sglang.multimodal_gen.runtime.platforms import current_platform, get_platform_decision
d = get_platform_decision()
print(type(current_platform).__name__, d.rule, d.entry_point, d.dist, sep="|")
print("imported:", sorted(m for m in sys.modules if m.startswith("dvendor_")))
print("torch" in sys.modules, "importlib.metadata" in sys.modules)
"""


def dvendor(root: Path, name: str, *, ret: str | None = None, body: str = "", ep_name: str | None = None, cls_body: str = "") -> Path:
    """A diffusion platform plugin distribution ``dvendor-<name>`` (package ``dvendor_<name>``)."""
    pkg = f"dvendor_{name}"
    ret = ret if ret is not None else f"'{pkg}.platform.Plat'"
    return make_dist(
        root,
        f"dvendor-{name}",
        entry_points={GROUP: {ep_name or name: f"{pkg}:activate"}},
        files={
            f"{pkg}/__init__.py": f"def activate():\n    {body or 'pass'}\n    return {ret}\n",
            f"{pkg}/platform.py": (
                "from sglang.multimodal_gen.runtime.platforms import Platform, PlatformEnum\n"
                f"class Plat(Platform):\n    _enum = PlatformEnum.OOT\n    device_name = '{name}'\n    device_type = '{name}'\n"
                + (cls_body or "")
            ),
        },
    )


def env(**kw: str) -> dict[str, str]:
    return clean_env(**{"SGLANG_DIFFUSION_PLATFORM_OVERRIDE" if k == "override" else k: v for k, v in kw.items()})


def test_builtin_alias_is_selected_without_probing_or_reading_entry_points(tmp_path):
    dvendor(tmp_path, "boom", body="raise RuntimeError('must not run')")
    out = ok(run_python(PRINT, [tmp_path], env(override="CPU")))
    assert "CpuPlatform|override: SGLANG_DIFFUSION_PLATFORM_OVERRIDE=CPU (built-in, not probed)|None|None" in out
    assert "imported: []" in out
    assert "False False" in out  # neither torch nor importlib.metadata was imported


def test_xpu_override_is_refused(tmp_path):
    err = failed(run_python(PRINT, [tmp_path], env(override="xpu")))
    assert "XPU is selected automatically only and cannot be forced" in err


def test_override_loads_only_the_named_entry_point(tmp_path):
    dvendor(tmp_path, "a")
    dvendor(tmp_path, "b", body="raise RuntimeError('b must not run')")
    out = ok(run_python(PRINT, [tmp_path], env(override="a")))
    assert "Plat|override: SGLANG_DIFFUSION_PLATFORM_OVERRIDE=a|a|dvendor-a" in out
    assert "imported: ['dvendor_a', 'dvendor_a.platform']" in out


def test_override_unknown_name_lists_what_is_installed(tmp_path):
    dvendor(tmp_path, "a")
    err = failed(run_python(PRINT, [tmp_path], env(override="nope")))
    assert "SGLANG_DIFFUSION_PLATFORM_OVERRIDE='nope' is neither a built-in" in err
    assert "'sglang.multimodal_gen.platforms'; available: a)" in err


def test_override_callback_returning_none_is_an_error(tmp_path):
    dvendor(tmp_path, "a", ret="None")
    err = failed(run_python(PRINT, [tmp_path], env(override="a")))
    assert "reports its hardware is not available (activate() returned None)" in err


def test_override_entry_point_name_matches_exactly(tmp_path):
    dvendor(tmp_path, "a", ep_name="MyDev")
    err = failed(run_python(PRINT, [tmp_path], env(override="mydev")))
    assert "is neither a built-in" in err


def test_auto_without_active_plugins_detects_a_builtin(tmp_path):
    dvendor(tmp_path, "a", ret="None")
    out = ok(run_python(PRINT, [tmp_path], env()))
    assert "CpuPlatform|auto: no plugin active, built-in cpu detected|None|None" in out


def test_auto_selects_the_single_active_plugin_and_records_its_distribution(tmp_path):
    dvendor(tmp_path, "a")
    dvendor(tmp_path, "b", ret="None")
    out = ok(run_python(PRINT, [tmp_path], env()))
    assert "Plat|auto: exactly one diffusion platform plugin active|a|dvendor-a" in out


def test_auto_with_two_active_plugins_asks_for_the_override(tmp_path):
    dvendor(tmp_path, "a")
    dvendor(tmp_path, "b")
    err = failed(run_python(PRINT, [tmp_path], env()))
    assert "2 diffusion platform plugins are active: a (dvendor-a), b (dvendor-b)" in err
    assert "SGLANG_DIFFUSION_PLATFORM_OVERRIDE=a" in err


def test_auto_callback_that_raises_aborts_instead_of_falling_back(tmp_path):
    dvendor(tmp_path, "a", body="raise RuntimeError('driver broke')")
    err = failed(run_python(PRINT, [tmp_path], env()))
    assert "activate() of diffusion platform entry point 'a'" in err
    assert "RuntimeError: driver broke. Start-up aborts instead of falling back to a built-in" in err


def test_duplicate_entry_point_names_are_rejected_before_import(tmp_path):
    dvendor(tmp_path / "one", "a", body="raise RuntimeError('imported')")
    make_dist(tmp_path / "two", "other-a", entry_points={GROUP: {"a": "other_a:activate"}}, files={"other_a/__init__.py": "raise RuntimeError('imported')\n"})
    err = failed(run_python(PRINT, [tmp_path / "one", tmp_path / "two"], env()))
    assert "duplicate diffusion platform entry-point names" in err and "imported" not in err.replace("imported:", "")


def test_entry_point_named_like_a_builtin_is_rejected(tmp_path):
    dvendor(tmp_path, "a", ep_name="cuda", body="raise RuntimeError('imported')")
    err = failed(run_python(PRINT, [tmp_path], env()))
    assert "entry point(s) 'cuda'" in err and "reuse a built-in platform name" in err


def test_external_class_must_declare_oot(tmp_path):
    dvendor(tmp_path, "a", ret="'dvendor_a.platform.Bad'", cls_body="class Bad(Platform):\n    device_name = 'a'\n    device_type = 'a'\n")
    err = failed(run_python(PRINT, [tmp_path], env()))
    assert "must set _enum = PlatformEnum.OOT" in err


def test_external_class_needs_non_blank_device_names(tmp_path):
    dvendor(
        tmp_path, "a", ret="'dvendor_a.platform.Bad'",
        cls_body="class Bad(Platform):\n    _enum = PlatformEnum.OOT\n    device_name = 'a'\n    device_type = '  '\n",
    )
    err = failed(run_python(PRINT, [tmp_path], env()))
    assert "must set a non-blank device_type (got '  ')" in err


def test_external_class_must_construct_without_arguments(tmp_path):
    body = "    def __init__(self, x):\n        pass\n"
    dvendor(tmp_path, "b", ret="'dvendor_b.platform.Bad'", cls_body="class Bad(Plat):\n" + body)
    err = failed(run_python(PRINT, [tmp_path], env(override="b")))
    assert "must be constructible without arguments" in err


def test_an_srt_platform_class_is_not_a_diffusion_platform(tmp_path):
    dvendor(
        tmp_path, "a", ret="'dvendor_a.platform.Srt'",
        cls_body="from sglang.srt.platforms import SRTPlatform\nclass Srt(SRTPlatform):\n    pass\n",
    )
    err = failed(run_python(PRINT, [tmp_path], env()))
    assert "is not a subclass of sglang.multimodal_gen.runtime.platforms.Platform" in err


def test_failed_selection_is_re_raised_and_never_published(tmp_path):
    dvendor(tmp_path, "a", body="raise RuntimeError('driver broke')")
    code = """
    from sglang.multimodal_gen.runtime import platforms as p
    for _ in range(2):
        try:
            p.current_platform
        except Exception as e:
            print(type(e).__name__, p.is_platform_resolved())
    """
    assert ok(run_python(code, [tmp_path], env())).split() == ["DiffusionPlatformActivationError", "False"] * 2


def test_init_backend_runs_once_and_a_failure_is_terminal(tmp_path):
    body = "    _calls = 0\n    def init_backend(self):\n        type(self)._calls += 1\n        raise RuntimeError('no firmware')\n"
    dvendor(tmp_path, "a", cls_body="", ret="'dvendor_a.platform.Flaky'")
    (tmp_path / "dvendor_a" / "platform.py").write_text(
        (tmp_path / "dvendor_a" / "platform.py").read_text() + "class Flaky(Plat):\n" + body
    )
    code = """
    from sglang.multimodal_gen.runtime.platforms import initialize_current_platform, current_platform
    for _ in range(2):
        try:
            initialize_current_platform()
        except Exception as e:
            print(type(e).__name__, '|', str(e)[:120], '|', type(e.__cause__).__name__)
    print('calls', type(current_platform)._calls)
    """
    lines = ok(run_python(code, [tmp_path], env())).splitlines()
    assert lines[0].startswith("BackendInitError | init_backend() of diffusion platform")
    assert lines[1].startswith("ActivationFailedError | diffusion init_backend() previously failed in this process and is not retried")
    assert lines[2] == "calls 1"


def test_platform_contract_is_checked_when_the_class_is_defined():
    code = """
    from sglang.multimodal_gen.runtime.platforms import Platform
    try:
        class P(Platform):
            def get_attn_backend(self):
                pass
    except TypeError as e:
        print(e)
    try:
        class Q(Platform):
            def get_device(self):
                pass
    except TypeError as e:
        print(e)
    """
    out = ok(run_python(code))
    assert "__main__.P does not match the sglang.multimodal_gen.runtime.platforms.Platform interface (1 problem" in out
    assert "  - get_attn_backend is not part of the sglang.multimodal_gen.runtime.platforms.Platform interface: rename it to '_get_attn_backend'" in out
    assert "  - get_device overrides" in out and "does not accept the interface's parameter 'local_rank'" in out


def test_activation_that_reads_current_platform_fails_loudly_instead_of_deadlocking(tmp_path):
    dvendor(tmp_path, "a", body="from sglang.multimodal_gen.runtime.platforms import current_platform; current_platform")
    err = failed(run_python(PRINT, [tmp_path], env(), timeout=60))
    assert "the diffusion current_platform was accessed while it is being selected" in err
    assert "move that code to the platform's init_backend()" in err
