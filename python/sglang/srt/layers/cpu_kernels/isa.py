"""Which kernel family (instruction set) the CPU kernels are built for: decided here and nowhere else.

A family is a set of CPU features and the compiler flags that let the kernels use them; every family
is its own library (``build.py``), compiled with exactly those flags, never ``-march=native``, so a
cached library runs on any CPU that has its family's features. The family is chosen at run time from
the CPU's own flags (``/proc/cpuinfo``: Linux lists an AVX-512 feature only when the OS saves its
register state, i.e. when XCR0 enables it): the best family the CPU has, or the one
``SGLANG_CPU_ISA`` names (``auto``, the default, picks). A family the CPU lacks is refused with
:class:`IsaError`, before anything runs an instruction the CPU would fault on.

AMX (``amx_tile``/``amx_int8``) has no family yet: no AMX kernel has been tested on an AMX machine,
so none is selectable; an AMX CPU runs ``avx512_vnni``. Stdlib only (``import sglang`` stays light).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

ENV = "SGLANG_CPU_ISA"


class IsaError(RuntimeError):
    """The kernel family asked for (``SGLANG_CPU_ISA``) is unknown or this CPU lacks its features."""


@dataclass(frozen=True)
class Family:
    name: str
    features: frozenset[str]  # /proc/cpuinfo flags the family's instructions need
    cflags: tuple[str, ...]  # exactly these, so a build never depends on the build machine's CPU
    summary: str


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family("avx512_vnni", frozenset({"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni"}),
               ("-mavx2", "-mfma", "-mf16c", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx512vnni",
                "-mprefer-vector-width=256"),
               "AVX-512F/BW/VL/DQ + VNNI: int8 dot products by vpdpbusd"),
        Family("avx2", frozenset({"avx2", "fma", "f16c"}), ("-mavx2", "-mfma", "-mf16c"),
               "AVX2 + FMA + F16C: int8 dot products by vpmaddubsw + vpmaddwd"),
    )
}
PREFERENCE = ("avx512_vnni", "avx2")  # best first


@dataclass(frozen=True)
class Choice:
    family: Family
    reason: str

    def format(self) -> str:
        return f"{self.family.name} ({self.reason})"


def supported(flags: frozenset[str]) -> list[str]:
    """The families a CPU with ``flags`` can run, best first."""
    return [n for n in PREFERENCE if FAMILIES[n].features <= flags]


def choose(flags: frozenset[str], forced: str | None) -> Choice:
    """The family for a CPU with ``flags``; ``forced`` is ``SGLANG_CPU_ISA``'s value (None/``auto``: the best).

    Raises ``IsaError`` for an unknown name, a family the CPU lacks, or a CPU with no family."""
    extra = "; amx_int8 present but no AMX family is built (untested)" if "amx_int8" in flags else ""
    forced = (forced or "auto").strip().lower()
    if forced != "auto":
        fam = FAMILIES.get(forced)
        if fam is None:
            raise IsaError(f"{ENV}={forced!r} is not a kernel family: use auto or one of {', '.join(PREFERENCE)}")
        missing = sorted(fam.features - flags)
        if missing:
            raise IsaError(f"{ENV}={forced}: this CPU lacks {', '.join(missing)}; it runs {', '.join(supported(flags)) or 'none'}"
                           f" (unset {ENV} to pick the best)")
        return Choice(fam, f"forced by {ENV}{extra}")
    names = supported(flags)
    if not names:
        raise IsaError(f"this CPU has none of the kernel families ({', '.join(PREFERENCE)}): the CPU kernels need at least "
                       "avx2, fma and f16c; run with --fused-decode off and --quantization none")
    fam = FAMILIES[names[0]]
    return Choice(fam, f"the best this CPU has: {', '.join(sorted(fam.features & flags))}; {ENV} unset{extra}")


def host_choice() -> Choice:
    """The family for this process's CPU and environment. Who calls: the kernel build, ``sglang platform``."""
    from sglang.host import cpu_flags

    return choose(cpu_flags(), os.environ.get(ENV))
