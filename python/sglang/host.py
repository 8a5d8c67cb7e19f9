"""Facts about the host machine that the CPU platforms of both runtimes report (stdlib only)."""

from __future__ import annotations

import os
import platform


def meminfo(field: str) -> int | None:
    """Bytes of ``field`` (``MemTotal``, ``MemAvailable``) in /proc/meminfo; ``None`` if unreadable."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def total_memory() -> int:
    return meminfo("MemTotal") or os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def available_memory() -> int:
    return meminfo("MemAvailable") or total_memory()


def _first_cpu(path: str) -> dict[str, str]:
    """The fields of the first processor's block of a /proc/cpuinfo-format file (empty if unreadable)."""
    fields: dict[str, str] = {}
    try:
        with open(path) as f:
            for line in f:
                if not line.strip():
                    if fields:
                        break  # the first processor's block ends
                    continue
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


def _model_name(fields: dict[str, str]) -> str:
    return fields.get("model name") or platform.processor() or platform.machine() or "cpu"


def cpu_model_name(path: str = "/proc/cpuinfo") -> str:
    """The ``lscpu`` model name ("AMD EPYC"); the platform's processor or machine name if unlisted."""
    return _model_name(_first_cpu(path))


def cpu_model(path: str = "/proc/cpuinfo") -> str:
    """The CPU model as measurements key it: the model name with its family and model numbers, e.g.
    ``"AMD EPYC (family 23 model 1)"``. One model name covers several generations (a Zen 1 and a Zen 2 EPYC
    both read "AMD EPYC" in a VM) whose kernels run at different speeds; the numbers tell them apart. The
    bare name where the file lists no numbers."""
    fields = _first_cpu(path)
    name = _model_name(fields)
    family, model = fields.get("cpu family"), fields.get("model")
    return f"{name} (family {family} model {model})" if family and model else name


def cpu_flags() -> frozenset[str]:
    """The instruction-set flags of the first CPU in /proc/cpuinfo (empty if unreadable)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def cpu_signature() -> str:
    """The CPU model and its flags: what a build for ``-march=native`` depends on."""
    try:
        with open("/proc/cpuinfo") as f:
            lines = [ln for ln in f if ln.startswith(("model name", "flags"))]
        return "".join(sorted(set(lines)))
    except OSError:
        return platform.processor() or platform.machine()
