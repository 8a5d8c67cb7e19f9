"""`sglang platform` (what `make run` shows today) as a user runs it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from helpers.dists import clean_env, make_dist

SGLANG = shutil.which("sglang", path=str(Path(sys.executable).parent)) or "sglang"


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SGLANG, *args], capture_output=True, text=True, env=env, timeout=120)


def _hook_plugin(tmp_path: Path, dist: str, group: str, name: str, registry_module: str, hook_type: str) -> None:
    """A general plugin distribution whose callback hooks ``json.dumps``."""
    module = dist.replace("-", "_")
    make_dist(
        tmp_path,
        dist,
        entry_points={group: {name: f"{module}:register"}},
        files={
            f"{module}/__init__.py": (
                f"from {registry_module} import HookRegistry, HookType\n"
                "def register():\n"
                f"    HookRegistry.register('json:dumps', lambda *a, **k: None, HookType.{hook_type})\n"
            )
        },
    )


def test_reports_platform_decision_plugins_and_hooks(tmp_path):
    _hook_plugin(tmp_path, "acme-hooks", "sglang.srt.plugins", "acme", "sglang.srt.plugins.hook_registry", "BEFORE")
    env = clean_env(SGLANG_USE_CPU_ENGINE="1", PYTHONPATH=str(tmp_path))
    proc = _run(["platform"], env)
    assert proc.returncode == 0, proc.stderr
    assert "SRT platform: sglang.srt.platforms.cpu.CpuSRTPlatform" in proc.stdout
    assert "rule: fallback: SGLANG_USE_CPU_ENGINE=1" in proc.stdout
    assert "- acme [acme-hooks 0.1.0] loaded" in proc.stdout
    assert "json.dumps: BEFORE:acme_hooks.register.<locals>.<lambda> [acme]" in proc.stdout
    from sglang.host import cpu_flags
    from sglang.srt.layers.cpu_kernels.isa import choose

    family = choose(cpu_flags(), None).family.name  # this CPU's best, from its flags (the clean environment unsets SGLANG_CPU_ISA)
    assert f"CPU kernel family: {family} (the best this CPU has: " in proc.stdout
    data = json.loads(_run(["platform", "--json"], env).stdout)
    assert data["cpu_kernel_family"]["family"] == family and "SGLANG_CPU_ISA unset" in data["cpu_kernel_family"]["reason"]
    from sglang.host import cpu_model
    from sglang.srt.layers.cpu_kernels.isa import auto_kv_dtype, gguf_math

    plan = gguf_math(family, cpu_model(), None).format()  # the measured table's plan for this CPU (env unset)
    assert data["cpu_kernel_family"]["gguf_math"] == plan and f"GGUF kernels (float32 models): {plan}" in proc.stdout
    kv = auto_kv_dtype(gguf_math(family, cpu_model(), None))
    assert data["cpu_kernel_family"]["kv_cache_dtype_auto"] == kv and f"--kv-cache-dtype auto (float32 models on GGUF blocks): {kv}" in proc.stdout
    from sglang.srt.layers.cpu_kernels.isa import format_prefetch, weight_prefetch

    pf = format_prefetch(weight_prefetch(family, cpu_model(), None))
    assert data["cpu_kernel_family"]["weight_prefetch"] == pf and f"weight prefetch of the integer GGUF kernels: {pf}" in proc.stdout
    forced = _run(["platform"], {**env, "SGLANG_CPU_ISA": "avx2", "SGLANG_CPU_GGUF_MATH": "mixed", "SGLANG_CPU_WEIGHT_PREFETCH": "512"})
    assert "CPU kernel family: avx2 (forced by SGLANG_CPU_ISA" in forced.stdout
    assert "GGUF kernels (float32 models): mixed math (forced by SGLANG_CPU_GGUF_MATH)" in forced.stdout
    forced_pf = format_prefetch(weight_prefetch("avx2", cpu_model(), "512"))  # passes of as many rows as this CPU's entry measured
    assert forced_pf.startswith("512 bytes ahead") and forced_pf.endswith("(forced by SGLANG_CPU_WEIGHT_PREFETCH)")
    assert f"weight prefetch of the integer GGUF kernels: {forced_pf}" in forced.stdout
    bad = _run(["platform"], {**env, "SGLANG_CPU_WEIGHT_PREFETCH": "far"})
    assert bad.returncode == 0 and "weight prefetch of the integer GGUF kernels: refused: SGLANG_CPU_WEIGHT_PREFETCH='far'" in bad.stdout
    assert data["platform"]["rule"] == "fallback: SGLANG_USE_CPU_ENGINE=1"
    assert data["plugins"][0]["status"] == "loaded"


def test_bad_platform_selection_is_a_one_line_error_with_the_fix(tmp_path):
    proc = _run(["platform"], clean_env(SGLANG_PLATFORM="nope"))
    assert proc.returncode == 1
    assert "sglang platform: error: PlatformSelectionError: SGLANG_PLATFORM='nope' matches no installed platform plugin" in proc.stderr
    assert "unset SGLANG_PLATFORM" in proc.stderr


def test_help_lists_the_subcommands():
    proc = _run(["--help"], dict(os.environ))
    assert proc.returncode == 0 and "platform" in proc.stdout and "serve" in proc.stdout


def test_reports_the_diffusion_runtime_on_request(tmp_path):
    _hook_plugin(tmp_path, "acme-diffusion-hooks", "sglang.multimodal_gen.plugins", "acme_diff",
                 "sglang.multimodal_gen.runtime.platforms.plugins", "AFTER")
    env = clean_env(SGLANG_DIFFUSION_PLATFORM_OVERRIDE="cpu", PYTHONPATH=str(tmp_path))
    proc = _run(["platform", "--runtime", "diffusion"], env)
    assert proc.returncode == 0, proc.stderr
    assert "diffusion platform: sglang.multimodal_gen.runtime.platforms.builtin.CpuPlatform" in proc.stdout
    assert "rule: override: SGLANG_DIFFUSION_PLATFORM_OVERRIDE=cpu (built-in, not probed)" in proc.stdout
    assert "- acme_diff [acme-diffusion-hooks 0.1.0] loaded" in proc.stdout
    assert "json.dumps: AFTER:acme_diffusion_hooks.register.<locals>.<lambda> [acme_diff]" in proc.stdout
    data = json.loads(_run(["platform", "--runtime", "diffusion", "--json"], env).stdout)
    assert data["runtime"] == "diffusion" and data["plugins"][0]["name"] == "acme_diff"
    assert "SRT" not in proc.stdout  # the SRT chain is not run for a diffusion report


def test_platform_and_doctor_report_the_decision_serve_would_make_with_a_truthful_rule():
    # no SGLANG_* variable and no accelerator: both commands show the CPU engine, and the rule names
    # no variable the user never set (before, `sglang platform` showed the base SRTPlatform)
    env = clean_env()
    platform = json.loads(_run(["platform", "--json"], env).stdout)["platform"]
    doctor = json.loads(subprocess.run([str(Path(sys.executable).parent / "sglang"), "plugins", "doctor", "--json"],
                                       capture_output=True, text=True, env=env, timeout=120).stdout)["srt_platform"]["decision"]
    assert platform["platform"] == doctor["platform"] == "sglang.srt.platforms.cpu.CpuSRTPlatform"
    assert platform["rule"] == doctor["rule"] == "no accelerator found: the CPU engine, the --device auto default"
    assert "SGLANG_USE_CPU_ENGINE" not in platform["rule"]
