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


def cpu_model_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


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
