"""The example plugin packages, pip-installed, behave as the spec's quick starts say."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from helpers.dists import clean_env, failed, ok, run_python

pytestmark = [pytest.mark.model]

ROOT = Path(__file__).resolve().parents[2]
VERIFY = "from sglang.srt.platforms import current_platform; print(current_platform)"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """Both example packages pip-installed (offline) into one temporary target."""
    target = tmp_path_factory.mktemp("site")
    for pkg in ("my_platform_plugin", "my_general_plugin"):
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index", "--target", str(target), str(ROOT / "examples" / "plugins" / pkg)],
            check=True,
            capture_output=True,
            text=True,
        )
    return target


def test_platform_quickstart_verification_command(installed):
    # the spec's command, verbatim: python -c "<VERIFY>"
    assert ok(run_python(VERIFY, [installed])).strip() == "MySRTPlatform(device=my_device)"


def test_platform_quickstart_hidden_device_is_not_selected(installed):
    out = ok(run_python(VERIFY, [installed], clean_env(MY_DEVICE_VISIBLE="0", SGLANG_USE_CPU_ENGINE="1")))
    assert out.strip() == "CpuSRTPlatform(device=cpu)"


def test_platform_quickstart_explicit_selection_of_hidden_device_fails(installed):
    err = failed(run_python(VERIFY, [installed], clean_env(MY_DEVICE_VISIBLE="0", SGLANG_PLATFORM="my_device")))
    assert "my-platform-plugin 0.1.0 selected by SGLANG_PLATFORM reports its hardware is not available" in err


def test_example_platform_implements_its_device_operations(installed):
    code = """
    from sglang.srt.platforms import current_platform as p, get_platform_decision
    print(p.is_out_of_tree(), p.get_device_name(), p.get_device_total_memory(), p.get_default_attention_backend())
    print(get_platform_decision().dist, get_platform_decision().rule)
    """
    out = ok(run_python(code, [installed])).splitlines()
    assert out == ["True My Device 0 (emulated) 8589934592 my_device_attn", "my-platform-plugin auto: exactly one platform plugin active"]


def test_general_quickstart_registers_its_hook_with_provenance(installed):
    code = """
    from sglang.srt.plugins import load_plugins_by_group
    from sglang.srt.plugins.hook_registry import HookRegistry, PluginSource, _current_plugin_source
    plugins = load_plugins_by_group("sglang.srt.plugins")
    token = _current_plugin_source.set(PluginSource("my_plugin", "my-general-plugin", "0.1.0"))
    plugins["my_plugin"]()
    _current_plugin_source.reset(token)
    for h in HookRegistry.registered():
        print(h.type.name, h.target, h.qualname, h.source.dist)
    """
    out = ok(run_python(code, [installed])).strip()
    assert out == "AROUND sglang.srt.managers.scheduler.Scheduler.__init__ my_general_plugin.my_hook my-general-plugin"


DIFFUSION_VERIFY = "from sglang.multimodal_gen.runtime.platforms import current_platform; print(current_platform)"


def test_diffusion_verification_command_verbatim(installed):
    # SGLANG_DIFFUSION_PLATFORM_OVERRIDE=my_device python -c "<DIFFUSION_VERIFY>"
    out = ok(run_python(DIFFUSION_VERIFY, [installed], clean_env(SGLANG_DIFFUSION_PLATFORM_OVERRIDE="my_device")))
    assert out.strip() == "my_platform_plugin.diffusion_platform.MyDiffusionPlatform(device_name='my_device', device_type='my_device')"


def test_diffusion_hidden_device_falls_back_to_a_builtin_in_auto_mode(installed):
    out = ok(run_python(DIFFUSION_VERIFY, [installed], clean_env(MY_DEVICE_VISIBLE="0")))
    assert out.strip().startswith("sglang.multimodal_gen.runtime.platforms.builtin.CpuPlatform(")


def test_example_platform_generates_images_with_its_kernel_and_hooks(installed, tmp_path):
    script = tmp_path / "gen.py"
    script.write_text(
        "from sglang.multimodal_gen import DiffGenerator\n"
        "if __name__ == '__main__':\n"
        "    with DiffGenerator.from_pretrained(model_path='digits-dit', log_level='warning') as g:\n"
        "        out = g.generate(prompt='a handwritten digit 8', seed=0, num_inference_steps=4)\n"
        "        w = g.info['worker']\n"
        "        print(out[0].label, w['device_name'], w.get('my_device_ready'), 'registered:rms_norm_forward' in w['dispatch'])\n"
    )
    env = clean_env(PYTHONPATH=str(installed))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "8 My Device 0 (emulated) True True"
    assert "my_device: rank 0 initialized" in proc.stderr


def test_engine_serves_on_the_example_platform_after_its_init_backend(installed):
    # the attention backend the platform names is registered by its init_backend(),
    # which the worker runs once before it builds the model
    code = """
    import sglang
    if __name__ == "__main__":
        with sglang.Engine(max_total_tokens=2048, log_level="warning") as e:
            out = e.generate("The capital of France is", {"max_new_tokens": 4, "temperature": 0})
            print(repr(out["text"]))
    """
    proc = run_python(code, [installed], clean_env(SGLANG_QUIET_LOAD="1"), timeout=300)
    lines = ok(proc).strip().splitlines()
    assert "Paris" in lines[-1]
    assert "Scheduler initialized! gpu_id=0" in lines  # the general example plugin's hook ran in the worker
