"""load_plugins(): allow-list, excluded dists, failure rules, once-per-process."""

from __future__ import annotations

import textwrap
from pathlib import Path

from helpers.dists import clean_env, failed, make_dist, ok, run_python

APP = '''
def greet(name):
    return f"hello {name}"

def other(x):
    return x

LIMIT = 3
'''

REPORT = """
import sys, logging
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="LOG %(levelname)s %(message)s")
from sglang.srt.plugins import load_plugins, plugin_records
from sglang.srt.plugins.hook_registry import HookRegistry
load_plugins()
import app
print("RESULT", app.greet("w"))
for r in plugin_records():
    print("REC", r.name, r.dist, r.status, r.required)
for e in HookRegistry.describe("app.greet"):
    print("CHAIN", e.type.name, e.plugin, e.dist)
print("imported:", sorted(m for m in sys.modules if m.startswith("plug_")))
"""


def app(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "app.py").write_text(APP)
    return root


def general(root: Path, name: str, body: str, *, ep_name: str | None = None, platform_ep: dict[str, str] | None = None, files: dict[str, str] | None = None, dist: str | None = None) -> Path:
    """A distribution ``plug-<name>`` with a ``register()`` callback running ``body``."""
    pkg = f"plug_{name}"
    eps = {"sglang.srt.plugins": {ep_name or name: f"{pkg}:register"}}
    if platform_ep:
        eps["sglang.srt.platforms"] = platform_ep
    src = "from sglang.srt.plugins.hook_registry import HookRegistry, HookType, plugin_hook\n\ndef register():\n" + textwrap.indent(textwrap.dedent(body), "    ")
    return make_dist(root, dist or f"plug-{name}", entry_points=eps, files={f"{pkg}/__init__.py": src, **(files or {})})


AROUND = "HookRegistry.register('app.greet', lambda o, n: o(n) + ' [{tag}]', HookType.AROUND)\n"


def test_plugins_load_apply_and_carry_provenance(tmp_path):
    app(tmp_path)
    general(tmp_path, "one", AROUND.format(tag="one"))
    general(tmp_path, "two", AROUND.format(tag="two"))
    out = ok(run_python(REPORT, [tmp_path]))
    assert "RESULT hello w [one] [two]" in out  # plugin "two" registered last: its AROUND is outermost
    assert "CHAIN AROUND two plug-two\nCHAIN AROUND one plug-one" in out
    assert "REC one plug-one loaded False" in out


def test_order_is_by_entry_point_name_not_path_order(tmp_path):
    first, second = tmp_path / "p1", tmp_path / "p2"
    app(first)
    general(first, "zz", AROUND.format(tag="zz"))
    general(second, "aa", AROUND.format(tag="aa"))
    out1 = ok(run_python(REPORT, [first, second]))
    out2 = ok(run_python(REPORT, [second, first]))
    assert "RESULT hello w [aa] [zz]" in out1 and "RESULT hello w [aa] [zz]" in out2


def test_allow_list_is_applied_before_load(tmp_path):
    app(tmp_path)
    general(tmp_path, "keep", AROUND.format(tag="keep"))
    general(tmp_path, "skip", AROUND.format(tag="skip"))
    out = ok(run_python(REPORT, [tmp_path], clean_env(SGLANG_PLUGINS="keep")))
    assert "RESULT hello w [keep]" in out
    assert "REC skip plug-skip filtered" in out
    assert "imported: ['plug_keep']" in out


def _platform_dist(root: Path, name: str, eps: dict[str, str], general_body: str) -> None:
    pkg = f"plug_{name}"
    general(
        root,
        name,
        general_body,
        platform_ep={ep: f"{pkg}.plat:activate_{ep}" for ep in eps},
        files={
            f"{pkg}/plat.py": "".join(
                f"def activate_{ep}():\n    return {ret!r}\n" for ep, ret in eps.items()
            )
            + "from sglang.srt.platforms.interface import SRTPlatform\nclass P(SRTPlatform):\n    pass\n"
        },
    )


def test_distributions_of_non_selected_platforms_are_excluded(tmp_path):
    app(tmp_path)
    _platform_dist(tmp_path, "chosen", {"chosen": "plug_chosen.plat.P"}, AROUND.format(tag="chosen"))
    _platform_dist(tmp_path, "other", {"other": "plug_other.plat.P"}, AROUND.format(tag="other"))
    general(tmp_path, "neutral", AROUND.format(tag="neutral"))
    out = ok(run_python(REPORT, [tmp_path], clean_env(SGLANG_PLATFORM="chosen")))
    assert "RESULT hello w [chosen] [neutral]" in out
    assert "REC other plug-other excluded False" in out
    assert "REC chosen plug-chosen loaded True" in out
    assert "plug_other" not in out.split("imported:")[1]


def test_a_dist_that_also_provides_the_selected_platform_is_never_excluded(tmp_path):
    app(tmp_path)
    _platform_dist(tmp_path, "multi", {"gpu_a": "plug_multi.plat.P", "gpu_b": "plug_multi.plat.P"}, AROUND.format(tag="multi"))
    out = ok(run_python(REPORT, [tmp_path], clean_env(SGLANG_PLATFORM="gpu_b")))
    assert "RESULT hello w [multi]" in out and "REC multi plug-multi loaded True" in out


def test_auto_selected_platform_dist_is_recorded_and_others_excluded(tmp_path):
    app(tmp_path)
    _platform_dist(tmp_path, "live", {"live": "plug_live.plat.P"}, AROUND.format(tag="live"))
    _platform_dist(tmp_path, "dead", {"dead": None}, AROUND.format(tag="dead"))
    out = ok(run_python(REPORT, [tmp_path]))
    assert "RESULT hello w [live]" in out
    assert "REC dead plug-dead excluded False" in out and "REC live plug-live loaded True" in out


def test_optional_callback_failure_is_logged_and_its_hooks_discarded(tmp_path):
    app(tmp_path)
    general(tmp_path, "bad", AROUND.format(tag="bad") + "raise RuntimeError('half way')\n")
    general(tmp_path, "good", AROUND.format(tag="good"))
    out = ok(run_python(REPORT, [tmp_path]))
    assert "RESULT hello w [good]" in out
    assert "LOG ERROR plugin 'bad' (plug_bad:register) from plug-bad failed to run its callback" in out
    assert "Traceback" in out and "RuntimeError: half way" in out
    assert "REC bad plug-bad failed False" in out


def test_optional_load_failure_is_logged_and_others_load(tmp_path):
    app(tmp_path)
    general(tmp_path, "broken", "pass\n")
    (tmp_path / "plug_broken" / "__init__.py").write_text("import not_installed_dep\n")
    general(tmp_path, "good", AROUND.format(tag="good"))
    out = ok(run_python(REPORT, [tmp_path]))
    assert "RESULT hello w [good]" in out
    assert "failed to load: ModuleNotFoundError: No module named 'not_installed_dep'" in out


def test_optional_apply_failure_discards_every_hook_of_that_plugin(tmp_path):
    app(tmp_path)
    general(tmp_path, "wrong", AROUND.format(tag="wrong") + "HookRegistry.register('app.LIMIT', lambda *a: None, HookType.BEFORE)\n")
    general(tmp_path, "good", AROUND.format(tag="good"))
    out = ok(run_python(REPORT, [tmp_path]))
    assert "RESULT hello w [good]" in out  # wrong's valid hook on app.greet is gone too
    assert "failed to apply its hooks on 'app.LIMIT'" in out and "is a int, not a function" in out
    assert "CHAIN AROUND good plug-good" in out and "CHAIN AROUND wrong" not in out


def test_an_optional_plugin_whose_target_does_not_resolve_stays_pending_and_its_other_hooks_apply(tmp_path):
    app(tmp_path)
    general(tmp_path, "typo", AROUND.format(tag="typo") + "HookRegistry.register('app.gret', lambda *a: None, HookType.BEFORE)\n")
    general(tmp_path, "good", AROUND.format(tag="good"))
    out = ok(run_python(REPORT + "print('PENDING', [(s.target, s.source.plugin_name) for s, _ in HookRegistry.pending()])\n", [tmp_path]))
    assert "RESULT hello w [good] [typo]" in out  # upstream: a missing target is not the plugin's end
    assert "LOG ERROR hook target 'app.gret' of plugin typo (plug-typo) does not resolve" in out and "has no attribute 'gret'" in out
    assert "PENDING [('app.gret', 'typo')]" in out and "REC typo plug-typo loaded False" in out


def test_selected_platform_plugin_callback_failure_aborts(tmp_path):
    app(tmp_path)
    _platform_dist(tmp_path, "vend", {"vend": "plug_vend.plat.P"}, "raise RuntimeError('vendor init broke')\n")
    err = failed(run_python(REPORT, [tmp_path], clean_env(SGLANG_PLATFORM="vend")))
    assert "PluginLoadError: plugin 'vend' (plug_vend:register) from plug-vend failed to run its callback: RuntimeError: vendor init broke" in err
    assert "Start-up aborts because it ships with the selected platform" in err


def test_selected_platform_plugin_load_failure_aborts(tmp_path):
    app(tmp_path)
    _platform_dist(tmp_path, "vend", {"vend": "plug_vend.plat.P"}, "pass\n")
    (tmp_path / "plug_vend" / "__init__.py").write_text("raise ImportError('sdk')\n")
    (tmp_path / "plug_vend" / "__init__.py").write_text("")  # the platform module must import
    (tmp_path / "plug_vend" / "hooks.py").write_text("raise ImportError('sdk')\n")
    info = next(tmp_path.glob("plug_vend-*.dist-info")) / "entry_points.txt"
    info.write_text(info.read_text().replace("plug_vend:register", "plug_vend.hooks:register"))
    err = failed(run_python(REPORT, [tmp_path], clean_env(SGLANG_PLATFORM="vend")))
    assert "PluginLoadError" in err and "failed to load: ImportError: sdk" in err


def test_selected_platform_plugin_apply_failure_aborts_and_leaves_nothing_patched(tmp_path):
    app(tmp_path)
    general(tmp_path, "aaa", AROUND.format(tag="aaa"))
    _platform_dist(tmp_path, "vend", {"vend": "plug_vend.plat.P"}, "HookRegistry.register('app.nothing', lambda *a: None, HookType.BEFORE)\n")
    code = """
    import app
    from sglang.srt.plugins import load_plugins
    original = app.greet
    try:
        load_plugins()
    except Exception as e:
        print(type(e).__name__, e)
    print("patched:", app.greet is not original)
    """
    out = ok(run_python(code, [tmp_path], clean_env(SGLANG_PLATFORM="vend")))
    assert "PluginLoadError hooks of vend (plug-vend) could not be applied to 'app.nothing'" in out
    assert "patched: False" in out


def test_strict_mode_makes_any_failure_abort(tmp_path):
    app(tmp_path)
    general(tmp_path, "bad", "raise RuntimeError('nope')\n")
    err = failed(run_python(REPORT, [tmp_path], clean_env(SGLANG_PLUGINS_STRICT="1")))
    assert "Start-up aborts because SGLANG_PLUGINS_STRICT=1 is set" in err


def test_once_per_process_reentrant_and_threads_inherit(tmp_path):
    app(tmp_path)
    general(
        tmp_path,
        "counter",
        """
        import plug_counter as m
        m.CALLS = getattr(m, "CALLS", 0) + 1
        from sglang.srt.plugins import load_plugins
        load_plugins()  # re-entrant: returns at once
        import time; time.sleep(0.2)
        """ + AROUND.format(tag="c"),
    )
    code = """
    import threading
    from sglang.srt.plugins import load_plugins
    threads = [threading.Thread(target=load_plugins) for _ in range(6)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    load_plugins()
    import app, plug_counter
    print(plug_counter.CALLS, app.greet("x"))
    """
    assert ok(run_python(code, [tmp_path])).strip() == "1 hello x [c]"


def test_failure_is_recorded_and_reraised_later(tmp_path):
    app(tmp_path)
    _platform_dist(tmp_path, "vend", {"vend": "plug_vend.plat.P"}, "raise RuntimeError('broken')\n")
    code = """
    from sglang.srt.plugins import load_plugins
    for _ in range(2):
        try:
            load_plugins()
        except Exception as e:
            print(type(e).__name__, "|", type(e.__cause__).__name__ if e.__cause__ else None)
    """
    out = ok(run_python(code, [tmp_path], clean_env(SGLANG_PLATFORM="vend"))).splitlines()
    assert out == ["PluginLoadError | RuntimeError", "ActivationFailedError | PluginLoadError"]


def test_load_plugins_by_group_returns_loaded_callables(tmp_path):
    general(tmp_path, "x", "pass\n")
    general(tmp_path, "y", "pass\n")
    code = """
    from sglang.srt.plugins import load_plugins_by_group
    print(sorted(load_plugins_by_group("sglang.srt.plugins", excluded_dists={"plug-y"})))
    """
    assert ok(run_python(code, [tmp_path])).strip() == "['x']"


POST_INIT = """
from sglang.srt.plugins.hook_registry import HookRegistry, HookType
def register():
    print("callback ran", flush=True)
    HookRegistry.register("sglang.srt.server_args.ServerArgs.__post_init__", lambda self: print("hook saw", self.model_path, flush=True), HookType.BEFORE)
"""


def test_constructing_or_unpickling_server_args_loads_plugins_first(tmp_path):
    # upstream: plugins load before any ServerArgs, so a hook on __post_init__ applies however it is built
    make_dist(tmp_path, "plug-postinit", entry_points={"sglang.srt.plugins": {"postinit": "plug_postinit:register"}},
              files={"plug_postinit/__init__.py": POST_INIT})
    built = ok(run_python("""
        import pickle, sys
        from sglang.srt.server_args import ServerArgs
        args = ServerArgs(model_path="smollm2-135m-instruct", device="cpu", max_total_tokens=256)
        sys.stdout.flush()
        sys.stdout.buffer.write(b"PICKLE " + pickle.dumps(args).hex().encode() + b"\\n")
        """, [tmp_path]))
    assert built.count("callback ran") == 1 and "hook saw smollm2-135m-instruct" in built
    blob = next(line for line in built.splitlines() if line.startswith("PICKLE ")).split()[1]
    loaded = ok(run_python(f"""
        import pickle
        args = pickle.loads(bytes.fromhex("{blob}"))
        from sglang.srt.plugins import plugin_records
        print("loaded", args.max_total_tokens, [(r.name, r.status) for r in plugin_records()])
        """, [tmp_path]))
    assert "callback ran" in loaded and "loaded 256 [('postinit', 'loaded')]" in loaded
    dummy = ok(run_python("""
        from sglang.srt.server_args import ServerArgs
        from sglang.srt.plugins import plugin_records
        ServerArgs(model_path="dummy")
        print("records", plugin_records())
        """, [tmp_path]))
    assert "callback ran" not in dummy and "records []" in dummy  # the fixture shortcut stays free
