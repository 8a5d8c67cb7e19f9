"""The spawn-safe worker bootstrap, over real ``spawn`` with a real plugin distribution.

The temporary distribution ``tdev-plugin`` ships a diffusion platform whose
``init_backend`` registers an RMSNorm forward, and a hook plugin with BEFORE
and AROUND hooks on ``GPUWorker.init_device_and_model``. Each of them appends
what it saw (pid, phase, imported modules) to a trace file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.dists import clean_env, make_dist, ok, run_python

PLATFORMS = "sglang.multimodal_gen.platforms"
PLUGINS = "sglang.multimodal_gen.plugins"

TRACE = '''
import json, os, sys

WORKER_MODULES = (
    "sglang.multimodal_gen.runtime.managers.gpu_worker",
    "sglang.multimodal_gen.runtime.managers.scheduler",
    "sglang.multimodal_gen.runtime.server_args",
)


def trace(event, **kw):
    from sglang.multimodal_gen.runtime.managers.worker_bootstrap import preimported_runtime_modules
    from sglang.multimodal_gen.runtime.platforms import is_backend_initialized
    from sglang.multimodal_gen.runtime.platforms.plugins import hooks_applied, plugins_registered

    rec = dict(
        event=event, pid=os.getpid(), backend=is_backend_initialized(), registered=plugins_registered(),
        applied=hooks_applied(), preimported=preimported_runtime_modules(),
        worker_imported=[m for m in WORKER_MODULES if m in sys.modules], **kw,
    )
    with open(os.environ["TDEV_TRACE"], "a") as f:
        f.write(json.dumps(rec) + "\\n")
'''

PLATFORM = '''
from sglang.multimodal_gen.runtime.platforms import Platform, PlatformEnum
from tdev.trace import trace


class TDevPlatform(Platform):
    _enum = PlatformEnum.OOT
    device_name = "tdev"
    device_type = "tdev"
    dispatch_key = "PrivateUse1"

    def get_dispatch_key_name(self):
        return "tdev"

    def get_device(self, local_rank):
        import torch
        return torch.device("cpu")

    def get_local_torch_device(self):
        import torch
        return torch.device("cpu")

    def get_compile_backend(self):
        trace("compile_backend")
        return "eager"

    def get_compile_options(self):
        return {}

    def init_backend(self):
        trace("init_backend")
        from sglang.multimodal_gen.runtime.layers.custom_op import CustomOp
        from sglang.multimodal_gen.runtime.layers.layernorm import RMSNorm
        from tdev.ops import rms_norm

        CustomOp.register_oot_forward(RMSNorm, fn=rms_norm, platform_key="tdev")
'''

OPS = '''
def rms_norm(op, x):
    return op.forward_native(x)
'''

HOOKS = '''
import os
from sglang.multimodal_gen.runtime.platforms.plugins import HookType, plugin_hook
from tdev.trace import trace

TARGET = "sglang.multimodal_gen.runtime.managers.gpu_worker.GPUWorker.init_device_and_model"


def register():
    trace("register")

    @plugin_hook(TARGET, type=HookType.BEFORE)
    def before(worker, *args, **kwargs):
        trace("before", rank=worker.rank)

    @plugin_hook(TARGET, type=HookType.AROUND)
    def around(original_fn, worker, *args, **kwargs):
        trace("around-enter")
        out = original_fn(worker, *args, **kwargs)
        worker.info["tdev"] = "initialized by the AROUND hook"
        return out

    if os.environ.get("TDEV_REPLACE_ENTRY"):
        @plugin_hook("sglang.multimodal_gen.runtime.managers.scheduler.run_scheduler_process", type=HookType.REPLACE)
        def replaced(server_args, rank, conn):
            raise RuntimeError("the REPLACE hook on run_scheduler_process ran")
'''

GOOD_SCRIPT = '''
import json
import os
import multiprocessing
from sglang.multimodal_gen import DiffGenerator  # a proxy: imports nothing yet

if __name__ == "__main__":
    multiprocessing.set_start_method("fork", force=True)  # the runtime keeps its own spawn context
    compile = bool(os.environ.get("TDEV_COMPILE"))
    with DiffGenerator.from_pretrained(model_path="digits-dit", log_level="warning", enable_torch_compile=compile) as gen:
        out = gen.generate(prompt="a handwritten digit 3", seed=1, num_inference_steps=4)
        print(json.dumps({"n": len(out), "label": out[0].label, "worker": gen.info["worker"], "decision": gen.info["decision"]["rule"]}))
'''

BAD_SCRIPT = '''
from sglang.multimodal_gen.runtime.pipelines.sampling_params import SamplingParams  # module scope: too early
from sglang.multimodal_gen import DiffGenerator

if __name__ == "__main__":
    with DiffGenerator.from_pretrained(model_path="digits-dit", log_level="warning") as gen:
        print(len(gen.generate(prompt="a handwritten digit 5", seed=2, num_inference_steps=3)))
'''


@pytest.fixture(scope="module")
def tdev(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tdev")
    return make_dist(
        root,
        "tdev-plugin",
        entry_points={PLATFORMS: {"tdev": "tdev:activate"}, PLUGINS: {"tdev": "tdev.hooks:register"}},
        files={
            "tdev/__init__.py": "def activate():\n    return 'tdev.platform.TDevPlatform'\n",
            "tdev/trace.py": TRACE,
            "tdev/platform.py": PLATFORM,
            "tdev/ops.py": OPS,
            "tdev/hooks.py": HOOKS,
        },
    )


def run_script(tmp_path: Path, source: str, paths: list[Path], **env: str) -> tuple[subprocess.CompletedProcess[str], list[dict]]:
    script = tmp_path / "offline.py"
    script.write_text(source)
    trace = tmp_path / "trace.jsonl"
    e = clean_env(TDEV_TRACE=str(trace), PYTHONPATH=os.pathsep.join(map(str, paths)), **env)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180, env=e, cwd=tmp_path)
    events = [json.loads(line) for line in trace.read_text().splitlines()] if trace.exists() else []
    return proc, events


def test_child_order_backend_then_registration_then_hooks_then_worker(tmp_path, tdev):
    proc, events = run_script(tmp_path, GOOD_SCRIPT, [tdev])
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    child_pid = next(e["pid"] for e in events if e["event"] == "init_backend")
    order = [e["event"] for e in events if e["pid"] == child_pid]
    assert order == ["init_backend", "register", "before", "around-enter"], events
    by = {e["event"]: e for e in events if e["pid"] == child_pid}
    # backend first, with a clean module table and nothing registered yet
    assert by["init_backend"]["preimported"] == [] and not by["init_backend"]["registered"]
    # plugin callbacks run after the backend and before any worker module is imported
    assert by["register"]["backend"] and by["register"]["worker_imported"] == [] and not by["register"]["applied"]
    # the hooks run in the worker after application
    assert by["before"]["applied"] and by["before"]["rank"] == 0
    assert result["worker"]["tdev"] == "initialized by the AROUND hook"
    assert "registered:rms_norm" in result["worker"]["dispatch"]  # init_backend's RMSNorm forward is used
    assert result["decision"] == "auto: exactly one diffusion platform plugin active"
    assert result["n"] == 1 and result["label"] == 3
    # the launcher registered and applied too, but never initialized a backend
    launcher = [e for e in events if e["pid"] != child_pid]
    assert [e["event"] for e in launcher] == ["register"] and not launcher[0]["backend"]
    assert "runtime modules were imported before platform initialization" not in proc.stderr


def test_module_scope_runtime_import_warns_naming_modules_and_script(tmp_path):
    proc, _ = run_script(tmp_path, BAD_SCRIPT, [])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("1")
    assert "runtime modules were imported before platform initialization: " in proc.stderr
    assert "sglang.multimodal_gen.runtime.pipelines.sampling_params" in proc.stderr
    assert f"module scope of {tmp_path / 'offline.py'}" in proc.stderr


def test_replace_hook_on_the_worker_entry_takes_effect(tmp_path, tdev):
    proc, _ = run_script(tmp_path, GOOD_SCRIPT, [tdev], TDEV_REPLACE_ENTRY="1")
    assert proc.returncode != 0
    assert "SchedulerStartError: the diffusion scheduler failed to start: RuntimeError: the REPLACE hook on run_scheduler_process ran" in proc.stderr


def test_broken_backend_aborts_the_worker_with_the_cause(tmp_path, tdev):
    broken = tmp_path / "broken"
    make_dist(
        broken, "tbroken", entry_points={PLATFORMS: {"tb": "tb:activate"}},
        files={"tb.py": (
            "from sglang.multimodal_gen.runtime.platforms import Platform, PlatformEnum\n"
            "def activate():\n    return 'tb.P'\n"
            "class P(Platform):\n    _enum = PlatformEnum.OOT\n    device_name = 'tb'\n    device_type = 'tb'\n"
            "    def init_backend(self):\n        raise RuntimeError('firmware missing')\n"
        )},
    )
    script = GOOD_SCRIPT.replace('log_level="warning"', 'log_level="warning", max_batch_size=4')
    proc, _ = run_script(tmp_path, script, [broken])
    assert proc.returncode != 0
    assert "init_backend() of diffusion platform" in proc.stderr and "firmware missing" in proc.stderr


def test_spec_payload_is_opaque_to_the_unpickler(tmp_path):
    import pickle

    from sglang.multimodal_gen.runtime.managers.worker_bootstrap import SchedulerProcessSpec, ServerArgsPayload
    from sglang.multimodal_gen.runtime.server_args import ServerArgs

    blob = tmp_path / "spec.pkl"
    blob.write_bytes(pickle.dumps(SchedulerProcessSpec(ServerArgsPayload.pack(ServerArgs(port=1234)))))
    code = f"""
    import pickle, sys
    spec = pickle.loads(open({str(blob)!r}, "rb").read())
    print(sorted(m for m in sys.modules if m.startswith("sglang")))
    print(spec.server_args.materialize().port)
    """
    out = ok(run_python(code)).splitlines()
    assert out[0] == str(["sglang", "sglang.multimodal_gen", "sglang.multimodal_gen.runtime", "sglang.multimodal_gen.runtime.managers", "sglang.multimodal_gen.runtime.managers.worker_bootstrap"])
    assert out[1] == "1234"


def test_torch_compile_uses_the_platform_compile_backend(tmp_path, tdev):
    proc, events = run_script(tmp_path, GOOD_SCRIPT, [tdev], TDEV_COMPILE="1")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1])["label"] == 3
    child = [e["event"] for e in events if e["event"] != "register" or e["backend"]]
    assert child == ["init_backend", "register", "before", "around-enter", "compile_backend"]
