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
