"""``sglang plugins doctor / explain / check / new`` against real installed distributions."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.dists import make_dist
from sglang.testing.plugins import PluginDists, clean_env

ROOT = Path(__file__).resolve().parents[2]
SCHED_INIT = "sglang.srt.managers.scheduler.Scheduler.__init__"
WORKER_INIT = "sglang.multimodal_gen.runtime.managers.gpu_worker.GPUWorker.init_device_and_model"


def pip_install(target: Path, *packages: Path) -> None:
    for pkg in packages:
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index", "--target", str(target), str(pkg)],
            check=True, capture_output=True, text=True,
        )


@pytest.fixture(scope="module")
def examples(tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("examples")
    pip_install(target, ROOT / "examples/plugins/my_platform_plugin", ROOT / "examples/plugins/my_general_plugin")
    return target


def sglang(args: list[str], *paths: Path, **env: str) -> subprocess.CompletedProcess[str]:
    e = clean_env(PYTHONPATH=":".join(map(str, paths)), **env)
    return subprocess.run([str(Path(sys.executable).parent / "sglang"), *args], capture_output=True, text=True, env=e, timeout=300)


def as_json(proc: subprocess.CompletedProcess[str]) -> dict:
    return json.loads(proc.stdout)


# -- doctor -------------------------------------------------------------------------------


def test_doctor_reports_installed_examples_with_their_decisions(examples):
    proc = sglang(["plugins", "doctor"], examples)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert f"sglang.srt.platforms: my_device = my_platform_plugin:activate [my-platform-plugin 0.1.0 at {examples}]" in out
    assert "SRT platform: my_platform_plugin.platform.MySRTPlatform from entry point 'my_device' (my-platform-plugin 0.1.0)" in out
    assert "rule: auto: exactly one diffusion platform plugin active" in out
    assert "- my_plugin [my-general-plugin 0.1.0] loaded" in out
    assert "- my_device [my-platform-plugin 0.1.0] (required by the selected platform) loaded" in out
    assert out.rstrip().endswith("doctor: all good")


def test_doctor_json_is_machine_readable(examples):
    rep = as_json(sglang(["plugins", "doctor", "--json"], examples))
    assert rep["ok"] is True
    assert {(e["group"], e["name"], e["dist"]) for e in rep["entry_points"]} == {
        ("sglang.srt.platforms", "my_device", "my-platform-plugin"),
        ("sglang.srt.plugins", "my_plugin", "my-general-plugin"),
        ("sglang.multimodal_gen.platforms", "my_device", "my-platform-plugin"),
        ("sglang.multimodal_gen.plugins", "my_device", "my-platform-plugin"),
    }
    assert rep["srt_platform"]["decision"]["candidates"][0]["status"] == "selected"


def test_doctor_names_an_inactive_platform_and_plugins_filtered_or_excluded(examples):
    rep = as_json(sglang(["plugins", "doctor", "--json"], examples, MY_DEVICE_VISIBLE="0", SGLANG_PLUGINS="other"))
    assert rep["ok"] is True
    cand = rep["srt_platform"]["decision"]["candidates"]
    assert [(c["name"], c["status"]) for c in cand] == [("my_device", "filtered")]
    text = sglang(["plugins", "doctor"], examples, MY_DEVICE_VISIBLE="0").stdout
    assert "- my_device [my-platform-plugin] inactive: activate() returned None" in text
    assert "- my_device [my-platform-plugin 0.1.0] excluded: its distribution ships a platform that is not selected" in text
    filtered = sglang(["plugins", "doctor"], examples, SGLANG_PLUGINS="nothing").stdout
    assert "- my_plugin [my-general-plugin 0.1.0] filtered by SGLANG_PLUGINS" in filtered


def test_doctor_explicit_selection_leaves_others_unprobed(examples, tmp_path):
    make_dist(tmp_path, "other-plat", entry_points={"sglang.srt.platforms": {"other": "other_plat:activate"}},
              files={"other_plat.py": "def activate():\n    raise RuntimeError('must not run')\n"})
    text = sglang(["plugins", "doctor"], examples, tmp_path, SGLANG_PLATFORM="my_device").stdout
    assert "rule: explicit: SGLANG_PLATFORM=my_device" in text
    assert "- other [no distribution] not probed (SGLANG_PLATFORM=my_device selects another)" in text


def test_doctor_fails_naming_a_broken_platform_and_a_broken_plugin(tmp_path):
    make_dist(tmp_path, "broken-plat", entry_points={"sglang.srt.platforms": {"bp": "broken_plat:activate"}},
              files={"broken_plat.py": "def activate():\n    raise RuntimeError('driver missing')\n"})
    make_dist(tmp_path, "broken-hook", entry_points={"sglang.multimodal_gen.plugins": {"bh": "broken_hook:register"}},
              files={"broken_hook.py": "def register():\n    raise ValueError('bad config')\n"})
    proc = sglang(["plugins", "doctor"], tmp_path)
    assert proc.returncode == 1
    assert "SRT platform: FAILED: PlatformActivationError: activate() of platform entry point 'bp'" in proc.stdout
    assert "  - bp [broken-plat 0.1.0] failed: RuntimeError: driver missing" in proc.stdout
    assert "- bh [broken-hook 0.1.0] failed: run its callback: ValueError: bad config" in proc.stdout
    assert proc.stdout.rstrip().endswith("doctor: something failed (see above)")


def test_doctor_lists_a_pending_hook_and_fails(tmp_path):
    make_dist(tmp_path, "late-hook", entry_points={"sglang.srt.plugins": {"late": "late_hook:register"}},
              files={"late_hook.py": "from sglang.srt.plugins.hook_registry import plugin_hook\n"
                                     "def register():\n    plugin_hook('not_yet_there.mod.fn')(lambda result, *a, **k: None)\n"})
    proc = sglang(["plugins", "doctor"], tmp_path)
    assert proc.returncode == 1
    assert "pending hook AFTER not_yet_there.mod.fn -> late_hook.register.<locals>.<lambda> of plugin late (late-hook)" in proc.stdout
    assert "module 'not_yet_there' is not installed" in proc.stdout
    rep = as_json(sglang(["plugins", "doctor", "--json"], tmp_path))
    assert [(p["target"], p["owner"]) for p in rep["srt_plugins"]["pending"]] == [("not_yet_there.mod.fn", "plugin late (late-hook)")]


def test_doctor_warns_about_a_shadowed_older_copy(examples, tmp_path):
    make_dist(tmp_path, "my-general-plugin", version="0.0.9", entry_points={"sglang.srt.plugins": {"old": "x:y"}})
    text = sglang(["plugins", "doctor"], examples, tmp_path).stdout
    assert f"warning: my-general-plugin is installed more than once (shadowed): 0.1.0 at {examples}/my_general_plugin-0.1.0.dist-info wins; hidden: 0.0.9 at {tmp_path}/my_general_plugin-0.0.9.dist-info" in text


# -- explain ------------------------------------------------------------------------------

HOOKS = """
from sglang.srt.plugins.hook_registry import HookType, plugin_hook

def register():
    @plugin_hook({target!r}, type=HookType.BEFORE)
    def {name}_before(*a, **k):
        return None

    @plugin_hook({target!r}, type=HookType.REPLACE)
    def {name}_replace(*a, **k):
        return None
    {tail}
"""


def test_explain_lists_the_chain_in_call_order_and_what_was_skipped(examples, tmp_path):
    for name, tail in (("alpha", ""), ("beta", ""), ("gamma", "raise RuntimeError('gamma broke')")):
        make_dist(tmp_path, f"{name}-dist", entry_points={"sglang.srt.plugins": {name: f"{name}_mod:register"}},
                  files={f"{name}_mod.py": HOOKS.format(target=SCHED_INIT, name=name, tail=tail)})
    proc = sglang(["plugins", "explain", SCHED_INIT], examples, tmp_path, SGLANG_PLUGINS="alpha,beta,gamma,my_plugin")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"target: {SCHED_INIT} (srt)"
    chain = [x.split()[1:3] for x in lines[2:6]]
    assert chain == [["BEFORE", "alpha_mod.register.<locals>.alpha_before"], ["BEFORE", "beta_mod.register.<locals>.beta_before"],
                     ["AROUND", "my_general_plugin.my_hook"], ["REPLACE", "beta_mod.register.<locals>.beta_replace"]]
    assert "[plugin beta, beta-dist 0.1.0] (core; overrides 1 other REPLACE)" in lines[5]
    skipped = "\n".join(lines[lines.index("registered but skipped:"):])
    assert "BEFORE gamma_mod.register.<locals>.gamma_before [plugin gamma, gamma-dist]: its plugin's callback raised RuntimeError: gamma broke" in skipped
    assert "REPLACE alpha_mod.register.<locals>.alpha_replace [plugin alpha, alpha-dist]: overridden by the later REPLACE beta_mod.register.<locals>.beta_replace" in skipped


def test_explain_json_and_a_diffusion_target(examples):
    rep = as_json(sglang(["plugins", "explain", WORKER_INIT, "--json"], examples))
    assert rep["runtime"] == "diffusion"
    assert [(e["type"], e["plugin"], e["dist"], e["version"]) for e in rep["chain"]] == [
        ("BEFORE", "my_device", "my-platform-plugin", "0.1.0"), ("AROUND", "my_device", "my-platform-plugin", "0.1.0")]


def test_explain_notes_plugins_that_did_not_run(examples):
    text = sglang(["plugins", "explain", SCHED_INIT], examples, SGLANG_PLUGINS="x").stdout
    assert "no hook is applied to this target" in text
    assert "plugin my_plugin [my-general-plugin] did not run (filtered by SGLANG_PLUGINS)" in text


# -- check --------------------------------------------------------------------------------


@pytest.mark.parametrize(("dist", "count"), [("my-platform-plugin", 69), ("my-general-plugin", 5)])
def test_check_passes_for_the_examples(examples, dist, count):
    proc = sglang(["plugins", "check", dist], examples)
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout.rstrip().endswith(f"{count} passed, 0 failed, 0 warnings")


def test_check_of_a_missing_distribution_fails():
    proc = sglang(["plugins", "check", "no-such-dist", "--json"])
    rep = as_json(proc)
    assert proc.returncode == 1 and rep["ok"] is False
    assert rep["results"] == [{"check": "distribution is installed", "status": "FAIL", "detail": "'no-such-dist' is not installed in this environment; pip install it first"}]


BAD_SRT = """
import sglang.srt.managers.scheduler  # the runtime, at activation

def activate():
    return "brk_import.NotAPlatform"

class NotAPlatform:
    pass
"""

TOUCH = """
def activate():
    from sglang.srt.platforms import current_platform
    current_platform.device_name
    return "brk_touch.p.P"

def activate_diffusion():
    return "brk_touch.p.NeedsArgs"
"""

TOUCH_CLASSES = """
from sglang.srt.platforms import SRTPlatform
from sglang.multimodal_gen.runtime.platforms import Platform, PlatformEnum

class P(SRTPlatform):  # not OOT, blank names, factories missing, capabilities of the wrong type
    capabilities = {"supports_triton": True}

class NeedsArgs(Platform):
    _enum = PlatformEnum.OOT
    device_name = "t"
    device_type = "t"

    def __init__(self, handle):
        self.handle = handle
"""

DIFF = """
from sglang.multimodal_gen.runtime.platforms.plugins import HookType, plugin_hook

def activate():
    raise RuntimeError("no driver")

def hooks():
    @plugin_hook("sglang.multimodal_gen.runtime.managers.gpu_worker.GPUWorker.no_such_method", type=HookType.BEFORE)
    def b(*a, **k):
        return None

    @plugin_hook("sglang.multimodal_gen.runtime.managers.gpu_worker.GPUWorker.init_device_and_model", type=HookType.AROUND)
    def wrong(original_fn):
        return original_fn()

def srt_hooks():
    raise ImportError("vendor sdk missing")
"""


@pytest.fixture(scope="module")
def broken(tmp_path_factory, examples) -> Path:
    root = tmp_path_factory.mktemp("broken")
    make_dist(root, "brk-import", entry_points={"sglang.srt.platforms": {"brk_import": "brk_import:activate"}}, files={"brk_import.py": BAD_SRT})
    make_dist(root, "brk-touch", entry_points={"sglang.srt.platforms": {"brk_touch": "brk_touch:activate"}, "sglang.multimodal_gen.platforms": {"brk_touch": "brk_touch:activate_diffusion"}},
              files={"brk_touch/__init__.py": TOUCH, "brk_touch/p.py": TOUCH_CLASSES})
    make_dist(root, "brk-diff", entry_points={
        "sglang.multimodal_gen.platforms": {"cuda": "brk_diff:activate"},
        "sglang.multimodal_gen.plugins": {"brk": "brk_diff:hooks"},
        "sglang.srt.plugins": {"my_plugin": "brk_diff:srt_hooks"},
    }, files={"brk_diff.py": DIFF})
    return root


def check(dist: str, *paths: Path) -> dict[str, tuple[str, str]]:
    proc = sglang(["plugins", "check", dist, "--json"], *paths)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    return {r["check"]: (r["status"], r["detail"]) for r in as_json(proc)["results"]}


def test_check_reports_a_runtime_import_and_a_class_of_the_wrong_base(broken):
    r = check("brk-import", broken)
    status, detail = r["sglang.srt.platforms:brk_import: activation callback is import-safe"]
    assert status == "FAIL" and detail.startswith("imported the runtime (") and "modules: sglang.srt.arg_groups, " in detail
    assert "sglang.srt.context" in detail
    assert r["sglang.srt.platforms:brk_import: subclasses sglang.srt.platforms.interface.SRTPlatform"][0] == "FAIL"


def test_check_reports_touching_current_platform_and_contract_gaps(broken):
    r = check("brk-touch", broken)
    assert r["sglang.srt.platforms:brk_touch: activation callback is import-safe"] == ("FAIL", "touched current_platform (SRT)")
    d = "sglang.multimodal_gen.platforms:brk_touch"
    assert r[f"{d}: declares PlatformEnum.OOT"][0] == "PASS"
    assert r[f"{d}: constructs without arguments"] == ("FAIL", "TypeError: NeedsArgs.__init__() missing 1 required positional argument: 'handle'")


def test_check_reports_contract_gaps_of_an_srt_class(broken):
    # the SRT callback of brk-touch fails, so check its class through a clean copy that returns it
    root = broken.parent / "srt-gaps"
    make_dist(root, "brk-gaps", entry_points={"sglang.srt.platforms": {"gaps": "brk_gaps:activate"}},
              files={"brk_gaps.py": "def activate():\n    return 'brk_touch.p.P'\n"})
    r = check("brk-gaps", root, broken)
    s = "sglang.srt.platforms:gaps"
    assert r[f"{s}: declares PlatformEnum.OOT"] == ("FAIL", "_enum = PlatformEnum.UNSPECIFIED")
    assert r[f"{s}: non-blank device_name"] == ("FAIL", "'unknown'")
    assert r[f"{s}: Active get_mha_kv_pool_cls()"] == ("FAIL", "missing: sglang.srt.model_executor.model_runner calls it and the default raises NotImplementedError")
    assert r[f"{s}: Active get_device()"][0] == "FAIL"
    assert r[f"{s}: Active capabilities"] == ("FAIL", "{'supports_triton': True} is not a sglang.srt.platforms.interface.PlatformCapabilities")


def test_check_reports_names_callbacks_and_hooks(broken, examples):
    r = check("brk-diff", broken, examples)
    assert r["sglang.multimodal_gen.platforms: entry-point names are unique"] == ("FAIL", "'cuda' is the name of a built-in diffusion platform")
    assert r["sglang.srt.plugins: entry-point names are unique"] == ("FAIL", "'my_plugin' is also provided by my-general-plugin")
    assert r["sglang.multimodal_gen.platforms:cuda: activation callback runs"] == ("FAIL", "RuntimeError: no driver")
    assert r["sglang.srt.plugins:my_plugin: callback runs and registers its hooks"] == ("FAIL", "ImportError: vendor sdk missing")
    bad_target = next(v for k, v in r.items() if k.endswith("on sglang.multimodal_gen.runtime.managers.gpu_worker.GPUWorker.no_such_method"))
    assert bad_target[0] == "FAIL" and "has no attribute 'no_such_method'" in bad_target[1]
    wrong = next(v for k, v in r.items() if ".wrong on " in k)
    assert wrong[0] == "FAIL" and wrong[1].startswith("AROUND hook(original_fn) cannot take (original_fn, self) of the target(self)")


# -- new ----------------------------------------------------------------------------------


def test_scaffolded_packages_pass_check_and_their_own_tests(tmp_path):
    out = tmp_path / "src"
    for kind, name in (("platform", "acme"), ("plugin", "tracer")):
        proc = sglang(["plugins", "new", kind, name, "--out", str(out)])
        assert proc.returncode == 0, proc.stderr
    site = tmp_path / "site"
    pip_install(site, out / "acme-platform", out / "tracer-plugin")
    for dist in ("acme-platform", "tracer-plugin"):
        proc = sglang(["plugins", "check", dist], site)
        assert proc.returncode == 0, proc.stdout
        assert ", 0 failed, 0 warnings" in proc.stdout
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(out / "acme-platform" / "tests"), str(out / "tracer-plugin" / "tests")],
        capture_output=True, text=True, env=clean_env(PYTHONPATH=str(site)), cwd=tmp_path, timeout=600,
    )
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert "3 passed" in tests.stdout


def test_new_refuses_bad_names_and_existing_directories(tmp_path):
    bad = sglang(["plugins", "new", "platform", "cuda", "--out", str(tmp_path)])
    assert bad.returncode == 2 and "NAME 'cuda' is a built-in platform name" in bad.stderr
    assert sglang(["plugins", "new", "plugin", "Bad-Name", "--out", str(tmp_path)]).returncode == 2
    assert sglang(["plugins", "new", "plugin", "ok", "--out", str(tmp_path)]).returncode == 0
    again = sglang(["plugins", "new", "plugin", "ok", "--out", str(tmp_path)])
    assert again.returncode == 2 and "already exists" in again.stderr


def test_plugin_dists_command_helper_runs_the_cli(plugin_dist: PluginDists):
    plugin_dist.add("helper-demo", {"sglang.srt.plugins": {"helper_demo": "helper_demo:register"}}, files={"helper_demo.py": "def register():\n    pass\n"})
    proc = plugin_dist.command(["sglang", "plugins", "check", "helper-demo"])
    assert proc.returncode == 0 and "PASS  sglang.srt.plugins:helper_demo: callback runs and registers its hooks: 0 hook(s)" in proc.stdout


GARBAGE = """
def activate():
    return 42

def activate_missing():
    return "garbage_plat.nowhere.Missing"

def activate_bad_contract():
    return "garbage_plat.bad.Bad"
"""

BAD_CONTRACT = """
from sglang.multimodal_gen.runtime.platforms import Platform, PlatformEnum

class Bad(Platform):
    _enum = PlatformEnum.OOT
    device_name = "g"
    device_type = "g"

    def get_device(self):  # drops the interface's local_rank
        return None
"""


def test_check_reports_garbage_names_that_do_not_import_and_contract_breaks(tmp_path):
    make_dist(tmp_path, "garbage-plat", entry_points={
        "sglang.srt.platforms": {"g_srt": "garbage_plat:activate", "g_missing": "garbage_plat:activate_missing"},
        "sglang.multimodal_gen.platforms": {"g_diff": "garbage_plat:activate_bad_contract"},
    }, files={"garbage_plat/__init__.py": GARBAGE, "garbage_plat/bad.py": BAD_CONTRACT})
    r = check("garbage-plat", tmp_path)
    assert r["sglang.srt.platforms:g_srt: activation callback returns a class"] == ("FAIL", "returned 42; return 'pkg.module.Class' or None")
    status, detail = r["sglang.srt.platforms:g_missing: garbage_plat.nowhere.Missing imports"]
    assert status == "FAIL" and "No module named 'garbage_plat.nowhere'" in detail
    status, detail = r["sglang.multimodal_gen.platforms:g_diff: garbage_plat.bad.Bad imports"]
    assert status == "FAIL" and "garbage_plat.bad.Bad does not match" in detail and "does not accept the interface's parameter 'local_rank'" in detail


def test_doctor_reports_a_failed_diffusion_selection(tmp_path):
    make_dist(tmp_path, "dup-a", entry_points={"sglang.multimodal_gen.platforms": {"same": "dup_a:activate"}}, files={"dup_a.py": "def activate():\n    return None\n"})
    make_dist(tmp_path / "b", "dup-b", entry_points={"sglang.multimodal_gen.platforms": {"same": "dup_b:activate"}}, files={"dup_b.py": "def activate():\n    return None\n"})
    proc = sglang(["plugins", "doctor", "--json"], tmp_path, tmp_path / "b")
    rep = as_json(proc)
    assert proc.returncode == 1 and rep["ok"] is False
    assert rep["diffusion_platform"]["error"].startswith("DiffusionPlatformSelectionError: duplicate diffusion platform entry-point names")
    assert [(p["name"], p["dist"], p["status"]) for p in rep["diffusion_platform"]["probe"]] == [("same", "dup-a", "inactive"), ("same", "dup-b", "inactive")]
