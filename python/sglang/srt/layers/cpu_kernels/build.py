"""Compile the CPU kernels on first use, once per machine, into a cache.

The C++ sources in ``csrc/`` are built with the system compiler (``$CXX`` or
``c++``) against the installed torch, one library per kernel family (``isa.py``:
the family's own flags, never ``-march=native``), into
``$SGLANG_KERNEL_CACHE`` (default ``~/.cache/sglang/kernels``). The file name
carries a hash of the sources, the torch and Python versions, the family, its
flags and the CPU's feature set, so a changed input builds anew and a cache
copied to another CPU rebuilds instead of faulting. A file lock keeps concurrent processes (TP ranks,
parallel tests) from compiling the same thing twice; the result is written to
a temporary name and renamed, so a reader never sees half a library.

Run ``python -m sglang.srt.layers.cpu_kernels`` to build ahead of time
(``make run`` and ``make test`` do); it prints the library's path.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import importlib.machinery
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from types import ModuleType

from sglang.srt.layers.cpu_kernels.isa import (
    FAMILIES,
    Choice,
    Family,
    IsaError,
    PrefetchSetting,
    format_prefetch,
    host_choice,
    host_weight_prefetch,
)

logger = logging.getLogger(__name__)

CSRC = Path(__file__).resolve().with_name("csrc")
DECODE_SOURCE = CSRC / "decode_step.cpp"
FIX = "install a C++ compiler (g++) with the Python headers, point $CXX at one, or run with --fused-decode off"


class KernelBuildError(RuntimeError):
    """The CPU kernels could not be built or loaded; the message says why and how to fix it."""


def cache_dir() -> Path:
    env = os.environ.get("SGLANG_KERNEL_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sglang" / "kernels"


def _cpu_signature() -> str:
    from sglang.host import cpu_signature

    return cpu_signature()


def _compiler() -> str:
    cxx = os.environ.get("CXX", "c++")
    path = shutil.which(cxx)
    if path is None:
        raise KernelBuildError(f"no C++ compiler found (looked for {cxx!r} on PATH) to build the CPU decode kernels: {FIX}")
    return path


def _command(cxx: str, source: Path, name: str, out: Path, family: Family) -> list[str]:
    import torch
    from torch.utils import cpp_extension

    includes = [*cpp_extension.include_paths(), sysconfig.get_paths()["include"]]
    torch_lib = cpp_extension.library_paths()[0]
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    return [
        cxx, str(source), "-o", str(out),
        "-shared", "-fPIC", "-std=c++17", "-O3", "-mtune=generic", *family.cflags, f"-DSGLANG_ISA_{family.name.upper()}", "-fopenmp",
        f"-I{source.parent}",  # its headers beside it (the package's csrc; an A/B's copy of another revision's)
        f"-DTORCH_EXTENSION_NAME={name}", "-DTORCH_API_INCLUDE_EXTENSION_H", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
        *(f"-isystem{p}" for p in includes),
        f"-L{torch_lib}", f"-Wl,-rpath,{torch_lib}", "-lc10", "-ltorch_cpu", "-ltorch", "-ltorch_python",
    ]


def _build_key(cxx: str, source: Path, family: Family) -> str:
    import torch

    h = hashlib.sha256()
    headers = b"".join(p.read_bytes() for p in sorted(source.parent.glob("*.h")))
    for part in (source.read_bytes(), headers, torch.__version__.encode(), sys.version.encode(), cxx.encode(),
                 family.name.encode(), " ".join(family.cflags).encode(), _cpu_signature().encode()):
        h.update(part)
        h.update(b"\0")
    return h.hexdigest()[:16]


def family_choice() -> Choice:
    """The kernel family this process uses (``isa.host_choice``), as a ``KernelBuildError`` when refused."""
    try:
        return host_choice()
    except IsaError as e:
        raise KernelBuildError(str(e)) from e


def build(source: Path = DECODE_SOURCE, stem: str = "sglang_cpu_decode", family: Family | None = None) -> Path:
    """Return the path of the built library for ``source`` and ``family`` (default: this CPU's), compiling it if the
    cache lacks it. A family the CPU lacks is refused (``KernelBuildError``): its library would fault."""
    if not source.is_file():
        raise KernelBuildError(f"kernel source {source} is missing: reinstall sglang")
    if family is None:
        family = family_choice().family
    else:
        from sglang.host import cpu_flags

        if missing := sorted(family.features - cpu_flags()):
            raise KernelBuildError(f"kernel family {family.name}: this CPU lacks {', '.join(missing)}")
    cxx = _compiler()
    name = f"{stem}_{family.name}_{_build_key(cxx, source, family)}"
    root = cache_dir()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise KernelBuildError(f"cannot create the kernel cache {root}: {e}; set SGLANG_KERNEL_CACHE to a writable directory") from e
    out = root / f"{name}.so"
    if out.is_file():
        return out
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a concurrent builder finishes first; then the file is there
        if out.is_file():
            return out
        tmp = root / f"{name}.so.tmp{os.getpid()}"
        cmd = _command(cxx, source, name, tmp, family)
        logger.info("building the CPU decode kernels for %s (once per machine, ~30 s) into %s", family.name, root)
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise KernelBuildError(f"compiling {source.name} with {cxx} failed: {e}; {FIX}") from e
        if proc.returncode != 0:
            tmp.unlink(missing_ok=True)
            tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
            raise KernelBuildError(f"compiling {source.name} with {cxx} failed (exit {proc.returncode}):\n{tail}\n{FIX}")
        os.replace(tmp, out)
        logger.info("built %s in %.1fs", out.name, time.perf_counter() - t0)
    return out


def load_decode_kernels(family: str | None = None) -> ModuleType:
    """The fused decode module (``DecodePlan``) of ``family`` (default: this process's, ``isa.host_choice``),
    built on first use; once per process and family. Its ``FAMILY`` attribute names the family.

    Raises ``KernelBuildError`` (every later call raises it again without
    rebuilding). Who may call: the model runner, tests, the prebuild command.
    """
    if family is None:
        choice = family_choice()
        family = choice.family.name
        module = _load(family)
        if family not in _logged:
            _logged.add(family)
            logger.info("CPU kernel family: %s; weight prefetch %s", choice.format(), format_prefetch(module.WEIGHT_PREFETCH))
        return module
    return _load(family)


_logged: set[str] = set()


def _cache_clear() -> None:
    _load.cache_clear()


load_decode_kernels.cache_clear = _cache_clear  # type: ignore[attr-defined]


@functools.cache
def _load(family: str) -> ModuleType:
    import torch  # noqa: F401  (libc10 and libtorch before the extension)

    fam = FAMILIES.get(family)
    if fam is None:
        raise KernelBuildError(f"unknown kernel family {family!r}: one of {', '.join(FAMILIES)}")
    path = build(family=fam)
    name = path.stem
    try:
        loader = importlib.machinery.ExtensionFileLoader(name, str(path))
        spec = importlib.util.spec_from_file_location(name, path, loader=loader)
        assert spec is not None
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
    except ImportError as e:
        raise KernelBuildError(f"the built kernel library {path} does not load: {e}; delete it to rebuild, or {FIX}") from e
    module.FAMILY = family
    apply_weight_prefetch(module, family)
    apply_step_redo(module)
    LOADED[family] = module
    return module


LOADED: dict[str, ModuleType] = {}  # the families' modules this process has loaded (cpu_binding binds their team)

STEP_REDO_ENV = "SGLANG_CPU_STEP_REDO"


def apply_step_redo(module: ModuleType) -> bool:
    """Set whether ``module``'s one-region step lets a thread take over a share another thread left overdue
    (``csrc/team_redo.h``; the same bits either way) from ``SGLANG_CPU_STEP_REDO``: ``on`` (the default: served,
    the front-ends preempt a step thread once a token) or ``off`` (every phase ends at a barrier). Anything else
    raises a ``ValueError`` naming the variable, left to abort start-up. Who calls: the loader."""
    raw = os.environ.get(STEP_REDO_ENV, "on").strip().lower()
    if raw not in ("on", "off"):
        raise ValueError(f"{STEP_REDO_ENV}={raw!r}: expected 'on' (the default) or 'off'")
    module.set_step_redo(raw == "on")
    return raw == "on"


def apply_weight_prefetch(module: ModuleType, family: str) -> PrefetchSetting:
    """Set ``module``'s weight prefetch (its library's, for every caller in this process) as
    ``isa.host_weight_prefetch`` decides for ``family`` on this CPU, and record it as ``module.WEIGHT_PREFETCH``.
    A malformed ``SGLANG_CPU_WEIGHT_PREFETCH`` raises its ``ValueError`` (naming it), left to abort start-up.
    Who calls: the loader, and benches that load a kernel source of their own (so they time what ships)."""
    setting = host_weight_prefetch(family)
    module.set_weight_prefetch(setting.bytes, setting.rows)
    module.WEIGHT_PREFETCH = setting
    return setting
