"""File templates of ``sglang plugins new`` (``string.Template``: ``$name`` placeholders)."""

from __future__ import annotations

PLATFORM = {
    "pyproject.toml": '''[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "$dist"
version = "0.1.0"
description = "SGLang platform plugin for the $name device (SRT and diffusion)"
dependencies = ["sglang"]

[project.entry-points."sglang.srt.platforms"]
$name = "$pkg:activate"

[project.entry-points."sglang.multimodal_gen.platforms"]
$name = "$pkg:activate_diffusion"

[tool.setuptools]
packages = ["$pkg"]
''',
    "$pkg/__init__.py": '''"""Activation callbacks of the $name platform: import-safe (no runtime, no device)."""

from __future__ import annotations

import os


def _available() -> bool:
    # Probe the device's driver here without initializing it. The generated
    # package emulates the device on the host; ${upper}_VISIBLE=0 hides it.
    return os.environ.get("${upper}_VISIBLE", "1") != "0"


def activate() -> str | None:
    """SRT: the platform class's qualified name, or None when the hardware is absent."""
    return "$pkg.platform.${cls}SRTPlatform" if _available() else None


def activate_diffusion() -> str | None:
    """Diffusion: the platform class's qualified name, or None when the hardware is absent."""
    return "$pkg.diffusion_platform.${cls}DiffusionPlatform" if _available() else None
''',
    "$pkg/device.py": '''"""Identity and device operations of $name (emulated on the host: tensors live on the CPU)."""

from __future__ import annotations

import resource
from typing import Any

from sglang.srt.platforms.device_mixin import DeviceCapability, DeviceMixin, PlatformEnum


class ${cls}DeviceMixin(DeviceMixin):
    _enum = PlatformEnum.OOT
    device_name = "$name"
    device_type = "cpu"  # the torch device type tensors are created on; a real device names its own

    def get_device(self, local_rank: int) -> Any:
        import torch

        return torch.device(self.device_type)

    def set_device(self, device: Any) -> None:
        pass

    def get_device_name(self, device_id: int = 0) -> str:
        return f"$name {device_id} (emulated)"

    def get_device_capability(self, device_id: int = 0) -> DeviceCapability | None:
        return DeviceCapability(1, 0)

    def get_device_total_memory(self, device_id: int = 0) -> int:
        from sglang.host import total_memory

        return total_memory()

    def get_available_memory(self, device_id: int = 0) -> tuple[int, int]:
        from sglang.host import available_memory, total_memory

        return available_memory(), total_memory()

    def get_current_memory_usage(self, device: Any = None) -> float:
        return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)

    def get_torch_distributed_backend_str(self) -> str:
        return "gloo"
''',
    "$pkg/platform.py": '''"""The SRT platform of $name."""

from __future__ import annotations

from $pkg.device import ${cls}DeviceMixin
from sglang.srt.platforms.interface import SRTPlatform


class ${cls}SRTPlatform(SRTPlatform, ${cls}DeviceMixin):
    def init_backend(self) -> None:
        """Once per worker, before the model is built: register kernels and backends here."""

    def get_default_attention_backend(self) -> str:
        return "torch_native"

    def get_graph_runner_cls(self) -> type:
        from sglang.srt.model_executor.graph_runner import EagerGraphRunner

        return EagerGraphRunner

    def get_mha_kv_pool_cls(self) -> type:
        from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool

        return MHATokenToKVPool

    def get_paged_allocator_cls(self) -> type:
        from sglang.srt.mem_cache.allocator import PagedTokenToKVPoolAllocator

        return PagedTokenToKVPoolAllocator

    def get_quantization_config(self, quantization: str | None) -> None:
        if quantization:
            raise ValueError(f"$name supports no quantization yet, got {quantization!r}")
        return None
''',
    "$pkg/diffusion_platform.py": '''"""The diffusion platform of $name."""

from __future__ import annotations

from typing import Any

from sglang.multimodal_gen.runtime.platforms import Platform, PlatformEnum


class ${cls}DiffusionPlatform(Platform):
    _enum = PlatformEnum.OOT
    device_name = "$name"
    device_type = "$name"
    dispatch_key = "CPU"  # the torch dispatch key of torch.library registrations

    def init_backend(self) -> None:
        """Once per worker, before any worker module is imported: register CustomOp forwards here."""

    def get_dispatch_key_name(self) -> str:
        return "$name"

    def get_device(self, local_rank: int) -> Any:
        import torch

        return torch.device("cpu")

    def get_local_torch_device(self) -> Any:
        import torch

        return torch.device("cpu")

    def get_device_name(self, device_id: int = 0) -> str:
        return f"$name {device_id} (emulated)"
''',
    "tests/test_$pkg.py": '''"""The generated package passes the conformance kit and is selected when asked for."""

import subprocess
import sys


def run(*args: str, **env: str) -> subprocess.CompletedProcess:
    import os

    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env={**os.environ, **env}, timeout=600)


def test_conformance_kit_passes():
    proc = run("-m", "sglang.cli.main", "plugins", "check", "$dist")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_explicit_selection_picks_this_platform():
    code = "from sglang.srt.platforms import current_platform as p; print(type(p).__name__)"
    proc = run("-c", code, SGLANG_PLATFORM="$name")
    assert proc.stdout.strip() == "${cls}SRTPlatform", proc.stderr
''',
    "README.md": '''# $dist

An SGLang hardware platform plugin for `$name`, generated by `sglang plugins new platform $name`.

    pip install -e .
    sglang plugins check $dist
    SGLANG_PLATFORM=$name python -c "from sglang.srt.platforms import current_platform; print(current_platform)"
    SGLANG_DIFFUSION_PLATFORM_OVERRIDE=$name python -c "from sglang.multimodal_gen.runtime.platforms import current_platform; print(current_platform)"
''',
}

PLUGIN = {
    "pyproject.toml": '''[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "$dist"
version = "0.1.0"
description = "SGLang general plugin $name (hooks for SRT and diffusion)"
dependencies = ["sglang"]

[project.entry-points."sglang.srt.plugins"]
$name = "$pkg:register_srt"

[project.entry-points."sglang.multimodal_gen.plugins"]
$name = "$pkg:register_diffusion"

[tool.setuptools]
packages = ["$pkg"]
''',
    "$pkg/__init__.py": '''"""Hooks of the $name plugin. Callbacks only register; the runtimes apply."""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger("$pkg")


def register_srt() -> None:
    from sglang.srt.plugins.hook_registry import HookType, plugin_hook

    @plugin_hook("sglang.srt.managers.scheduler.Scheduler.__init__", type=HookType.AROUND)
    def scheduler_init(original_fn: Any, self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original_fn(self, *args, **kwargs)
        logger.warning("$name: scheduler initialized")
        return result


def register_diffusion() -> None:
    from sglang.multimodal_gen.runtime.platforms.plugins import HookType, plugin_hook

    @plugin_hook("sglang.multimodal_gen.runtime.managers.gpu_worker.GPUWorker.init_device_and_model", type=HookType.BEFORE)
    def before_worker_init(worker: Any, *args: Any, **kwargs: Any) -> None:
        logger.warning("$name: initializing diffusion worker rank %d", worker.rank)
''',
    "tests/test_$pkg.py": '''"""The generated plugin passes the conformance kit."""

import os
import subprocess
import sys


def test_conformance_kit_passes():
    proc = subprocess.run([sys.executable, "-m", "sglang.cli.main", "plugins", "check", "$dist"], capture_output=True, text=True, env=dict(os.environ), timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
''',
    "README.md": '''# $dist

An SGLang general plugin, generated by `sglang plugins new plugin $name`.

    pip install -e .
    sglang plugins check $dist
    sglang plugins explain sglang.srt.managers.scheduler.Scheduler.__init__
''',
}
