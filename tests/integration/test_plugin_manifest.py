"""Every spawned process reports its plugin manifest at the handshake; the launcher compares."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from helpers.dists import clean_env, make_dist

pytestmark = [pytest.mark.model]

# A plugin that hooks a target only in the launcher process: every child's manifest differs.
FICKLE = """
import multiprocessing
from {api} import HookType, plugin_hook

def register():
    if multiprocessing.parent_process() is None:
        @plugin_hook("mtarget.f", type=HookType.AROUND)
        def only_in_launcher(original_fn, *a, **k):
            return original_fn(*a, **k)
"""

SRT_SCRIPT = """
import sglang
if __name__ == "__main__":
    with sglang.Engine(max_total_tokens=1024, log_level="warning") as e:
        print("served", e.generate("Hi", {"max_new_tokens": 1})["meta_info"]["completion_tokens"])
"""

DIFFUSION_SCRIPT = """
from sglang.multimodal_gen import DiffGenerator
if __name__ == "__main__":
    with DiffGenerator.from_pretrained(model_path="digits-dit", log_level="warning") as g:
        print("served", len(g.generate(prompt="1", num_inference_steps=2)))
"""


def fickle(root: Path, group: str, api: str) -> Path:
    (root / "mtarget.py").write_text("def f(x):\n    return x\n")
    return make_dist(root, "fickle-plugin", entry_points={group: {"fickle": "fickle:register"}}, files={"fickle.py": FICKLE.format(api=api)})


def run(tmp_path: Path, script: str, **env: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "main.py"
    path.write_text(script)
    e = clean_env(PYTHONPATH=str(tmp_path), SGLANG_QUIET_LOAD="1", **env)
    return subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300, env=e, cwd=tmp_path)


@pytest.mark.parametrize(
    ("group", "api", "script", "processes"),
    [
        ("sglang.srt.plugins", "sglang.srt.plugins.hook_registry", SRT_SCRIPT, ["scheduler TP0", "detokenizer"]),
        ("sglang.multimodal_gen.plugins", "sglang.multimodal_gen.runtime.platforms.plugins", DIFFUSION_SCRIPT, ["diffusion scheduler rank 0"]),
    ],
    ids=["srt", "diffusion"],
)
def test_a_child_whose_hooks_differ_is_named_in_a_warning(tmp_path, group, api, script, processes):
    fickle(tmp_path, group, api)
    proc = run(tmp_path, script)
    assert proc.returncode == 0, proc.stderr
    assert "served 1" in proc.stdout
    for name in processes:
        line = next(x for x in proc.stderr.splitlines() if f"plugin manifest of {name}" in x)
        assert "differs from the launcher's: hooks on mtarget.f: launcher ['AROUND fickle.register.<locals>.only_in_launcher [plugin fickle, fickle-plugin 0.1.0]'] vs here []" in line


@pytest.mark.parametrize(
    ("group", "api", "script"),
    [
        ("sglang.srt.plugins", "sglang.srt.plugins.hook_registry", SRT_SCRIPT),
        ("sglang.multimodal_gen.plugins", "sglang.multimodal_gen.runtime.platforms.plugins", DIFFUSION_SCRIPT),
    ],
    ids=["srt", "diffusion"],
)
def test_strict_mode_turns_a_manifest_mismatch_into_an_error(tmp_path, group, api, script):
    fickle(tmp_path, group, api)
    proc = run(tmp_path, script, SGLANG_PLUGINS_STRICT="1")
    assert proc.returncode != 0
    assert "PluginManifestMismatchError" in proc.stderr and "Start-up aborts because SGLANG_PLUGINS_STRICT=1 is set" in proc.stderr


def test_agreeing_manifests_give_no_warning(tmp_path):
    proc = run(tmp_path, DIFFUSION_SCRIPT)
    assert proc.returncode == 0, proc.stderr
    assert "served 1" in proc.stdout and "plugin manifest" not in proc.stderr


SUBCLASS = """
from sglang.srt.plugins.hook_registry import HookType, plugin_hook
from sglang.srt.managers.scheduler import Scheduler

class MyScheduler(Scheduler):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        print("MyScheduler built in", type(self).__module__, flush=True)

def register():
    plugin_hook("sglang.srt.managers.scheduler.Scheduler", type=HookType.REPLACE)(MyScheduler)
"""


def test_a_replaced_scheduler_class_is_what_each_rank_builds(tmp_path):
    """The spec's example: a general plugin swaps the Scheduler class (REPLACE); the spawned rank, which loads its
    plugins before it builds its scheduler, builds the subclass."""
    make_dist(tmp_path, "sub-plugin", entry_points={"sglang.srt.plugins": {"sub": "subsched:register"}}, files={"subsched.py": SUBCLASS})
    proc = run(tmp_path, SRT_SCRIPT)
    assert proc.returncode == 0, proc.stderr
    assert "served 1" in proc.stdout and "MyScheduler built in subsched" in proc.stdout
