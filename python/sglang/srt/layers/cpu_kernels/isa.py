"""Which kernel family (instruction set) the CPU kernels are built for: decided here and nowhere else.

A family is a set of CPU features and the compiler flags that let the kernels use them; every family
is its own library (``build.py``), compiled with exactly those flags, never ``-march=native``, so a
cached library runs on any CPU that has its family's features. The family is chosen at run time from
the CPU's own flags (``/proc/cpuinfo``: Linux lists an AVX-512 feature only when the OS saves its
register state, i.e. when XCR0 enables it): the best family the CPU has, or the one
``SGLANG_CPU_ISA`` names (``auto``, the default, picks). A family the CPU lacks is refused with
:class:`IsaError`, before anything runs an instruction the CPU would fault on.

``amx`` is the ``avx512_vnni`` library (the same sources and flags, built as its own library) plus AMX tile
products for batches: the ``bf16`` arithmetic below runs every linear layer through oneDNN's bfloat16 GEMM,
which uses AMX tiles where the CPU has them (``amx_tile``/``amx_bf16``; oneDNN asks the kernel for the tile
state itself). Its measured table decides at which batch sizes. Stdlib only (``import sglang`` stays light).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol, TypeVar

ENV = "SGLANG_CPU_ISA"


class IsaError(RuntimeError):
    """The kernel family asked for (``SGLANG_CPU_ISA``) is unknown or this CPU lacks its features."""


@dataclass(frozen=True)
class Family:
    name: str
    features: frozenset[str]  # /proc/cpuinfo flags the family's instructions need
    cflags: tuple[str, ...]  # exactly these, so a build never depends on the build machine's CPU
    summary: str


_VNNI_FEATURES = frozenset({"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni"})
_VNNI_FLAGS = ("-mavx2", "-mfma", "-mf16c", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx512vnni",
               "-mprefer-vector-width=256")
FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        # the avx512_vnni library plus AMX int8 tiles for its int16 products (amx_int16.h), and oneDNN's bfloat16 tiles
        Family("amx", _VNNI_FEATURES | {"avx512_bf16", "amx_tile", "amx_int8", "amx_bf16"}, (*_VNNI_FLAGS, "-mamx-tile", "-mamx-int8"),
               "AVX-512 VNNI kernels, 512-bit int16 products of 5-8 rows, AMX int8 tiles for 9+, AMX bfloat16 tiles (oneDNN) where its table says"),
        Family("avx512_vnni", _VNNI_FEATURES, _VNNI_FLAGS, "AVX-512F/BW/VL/DQ + VNNI: int8 dot products by vpdpbusd"),
        Family("avx2", frozenset({"avx2", "fma", "f16c"}), ("-mavx2", "-mfma", "-mf16c"),
               "AVX2 + FMA + F16C: int8 dot products by vpmaddubsw + vpmaddwd"),
    )
}
PREFERENCE = ("amx", "avx512_vnni", "avx2")  # best first


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
    forced = (forced or "auto").strip().lower()
    if forced != "auto":
        fam = FAMILIES.get(forced)
        if fam is None:
            raise IsaError(f"{ENV}={forced!r} is not a kernel family: use auto or one of {', '.join(PREFERENCE)}")
        missing = sorted(fam.features - flags)
        if missing:
            raise IsaError(f"{ENV}={forced}: this CPU lacks {', '.join(missing)}; it runs {', '.join(supported(flags)) or 'none'}"
                           f" (unset {ENV} to pick the best)")
        return Choice(fam, f"forced by {ENV}")
    names = supported(flags)
    if not names:
        raise IsaError(f"this CPU has none of the kernel families ({', '.join(PREFERENCE)}): the CPU kernels need at least "
                       "avx2, fma and f16c; run with --fused-decode off and --quantization none")
    fam = FAMILIES[names[0]]
    return Choice(fam, f"the best this CPU has: {', '.join(sorted(fam.features & flags))}; {ENV} unset")


def host_choice() -> Choice:
    """The family for this process's CPU and environment. Who calls: the kernel build, ``sglang platform``."""
    from sglang.host import cpu_flags

    return choose(cpu_flags(), os.environ.get(ENV))


# --- The GGUF kernels' arithmetic per batch size: decided here and nowhere else -----------------------------
# float32 models compute on the GGUF's Q4 blocks in one of six arithmetics (``weight_format.activation`` says
# which layer multiplies what): ``float32`` (the exact weights), ``int16`` (int16 activations for every layer and
# the LM head), ``mixed`` (int8 activations for ``o`` and ``gate_up`` only), ``mixed16`` (those and the LM head
# int8, int16 activations for the rest), ``int8`` (every layer and the LM head), or ``bf16`` (every layer and the head on bfloat16 copies of the blocks'
# weights, the rows rounded to bfloat16, float32 sums rounded to bfloat16: oneDNN's GEMM, AMX tiles; only a
# table that timed it, the ``amx`` family's, picks it). Each batch-size bucket runs the one that measured fastest
# on the CPU among those whose answers meet the quality bar; ``SGLANG_CPU_GGUF_MATH`` forces one at every size.
MATH_ENV = "SGLANG_CPU_GGUF_MATH"
MATHS = ("float32", "int16", "mixed", "mixed16", "bf16", "int8")  # most exact first
# (label, the most rows in the bucket; 0: any): a batch goes to the first bucket that admits it (a prefill
# counts its prompt tokens, so one request's prefill and decode steps fall in different buckets). Each bucket is
# timed at one batch (1 / 4 / 32 / 128 rows); the third ends at 32 because on the AMX Xeon bf16 and mixed16 cross
# there (equal at 32 rows, bf16 1.3x at 48 and 1.5x at 64): a bucket up to 64 timed at 32 would hide that.
BUCKETS: tuple[tuple[str, int], ...] = (("1", 1), ("2-8", 8), ("9-32", 32), (">32", 0))
# Teacher-forced top-1 agreement with the float32 reference, %, per bucket (None: not measured there), the lowest
# any CPU measured: ``bench/quality.py --configs default@MATH --tokens 32 --group G`` scores G-row decode steps after
# one prefill of G prompts (16 prompts x 32 positions; --group 8 and 16 also prefill above 32 rows). float32 is the
# exact weights (100% by construction). mixed on the AVX-512 EPYC (float32 KV): 99.41% at --group 1 and 8, 99.80% at
# 16; on the AVX2-only EPYC: 98.24% / 98.83% at 1 / 8 with a float32 KV, and as the default with its bfloat16 KV
# (auto_kv_dtype) 98.83% / 98.83% / 98.63% at 1 / 8 / 16 (a few near ties in 512 positions either way).
# mixed16 (its int16 layers keep float32's answers within a few parts in 1e5; its integer arithmetic is the same
# bits on every family) on the AVX-512 EPYC with the bfloat16 KV: 99.02% at 1, 8 and 16 (mixed in the same runs
# 98.83%, 99.22%, 99.02%); on the AVX2-only EPYC (the head on int8) 98.63% / 99.22% / 99.22% (mixed in the same runs
# 98.83% / 98.83% / 98.63%: the float sums around the integer products differ by family, so near ties do), and
# after the softmax moved to whole vectors (its sums in another order; the products' bits unchanged) 98.05% /
# 98.24% / 98.24% at KL 0.00136-0.00137 (0.00139 before): the same distribution, a few different near ties, one
# position in 512 above the bar at one row. int8: 96.48% with --group 8. bf16 on the AMX Xeon (family 6 model 167,
# bfloat16 KV): 98.05% / 97.85% / 98.44% at --group 1 / 8 / 16, KL 0.00064-0.00068 (half mixed16's 0.00137 in the
# same runs, whose agreement was 98.05% / - / 98.24%): the closer distribution, one near tie in 512 under the bar
# at 8 rows. An arithmetic is a candidate in a bucket only where it meets the bar there (None: not measured, so
# not a candidate): a request crosses buckets, so the bar must hold wherever its steps land, and it does when
# each step's arithmetic was measured to meet it at that step's batch size (and its mixtures: MIXES_ONLY_WITH).
# int16 on the AMX Xeon: 99.80% at --group 1, 8 and 16 (KL 0.00003-0.00004; its integer products are the same
# bits on every family).
AGREEMENT: dict[str, tuple[float | None, ...]] = {
    "float32": (100.0, 100.0, 100.0, 100.0),
    "int16": (99.80, 99.80, 99.80, 99.80),
    "mixed": (98.24, 98.83, 98.63, 98.83),
    "mixed16": (98.05, 98.24, 98.24, 98.24),
    "bf16": (98.05, 97.85, 98.44, 98.44),
    "int8": (None, 96.48, None, 96.48),
}
QUALITY_BAR = 98.0
# Arithmetics whose plans (one arithmetic per bucket) were scored as plans, and the only others they may share a plan
# with: a request prefilled in one arithmetic and decoded in another reads a KV cache the other did not write, and
# near ties flip again. Measured on the AMX Xeon (bench/quality.py --tokens 32 on the plan, --group 1 / 8 / 16):
# mixed16 up to 32 rows with bf16 above 97.46% / 97.66% / 97.85% (KL 0.0013-0.0014), under the bar though each
# passes alone; int16 up to 32 rows with bf16 above 99.22% / 99.02% / 99.41% (KL 0.0001). A plan that would mix an
# arithmetic here with one outside its list is not built: the fastest plan without it and the fastest plan of it
# and its partners only are compared (``plan_time``) and the faster taken.
MIXES_ONLY_WITH: dict[str, tuple[str, ...]] = {"bf16": ("float32", "int16")}
# Arithmetics kept out of ``auto`` although they pass, and why (SGLANG_CPU_GGUF_MATH still forces them). None
# now: ``mixed`` was held while its two costs were reviewed, and the project takes them for the default's speed
# (issue 27: the configuration with no flags is the fast one; the quality bar, not bit-exactness, is its test).
# (1) Its answers depend on the batch: the int8 kernels are row-exact, but quantizing activations to int8 turns
# the float32 kernels' ~1e-6 batch-order differences into whole quantization steps (up to 0.1 nats on a token's
# logprob between a request alone and in a batch of 4). (2) A near tie can flip a greedy answer against the
# reference. Who needs the reference's answers runs SGLANG_CPU_GGUF_MATH=float32 (exact weights, batch-invariant)
# or --quantization none (docs/engine.md, "GGUF arithmetic").
HELD: dict[str, str] = {}
# steps within this factor of a bucket's fastest count as a tie: a difference the measurement cannot vouch for
MARGIN = 1.05


class _OfCpu(Protocol):
    @property
    def cpu(self) -> str: ...


_Run = TypeVar("_Run", bound=_OfCpu)


@dataclass(frozen=True)
class Measured:
    """Whole fused decode steps (ms, from one interleaved run: medians, or the fastest with ``--best``) per
    arithmetic and bucket on one CPU."""

    cpu: str  # ``sglang.host.cpu_model()``: the model name with its family and model numbers
    command: str
    ms: dict[str, tuple[float, float, float, float]]  # math -> one figure per BUCKETS entry


# Per family, the runs that decide (``for_cpu``: a CPU model measured itself wins; the family's first run is the
# fallback): each printed by its ``command`` (one batch per bucket: 1 / 4 / 32 / 128 rows), pasted as printed.
# docs/benchmarks.md ("GGUF arithmetic per batch size") has the runs and their conditions.
MEASURED: dict[str, tuple[Measured, ...]] = {
    # the 2-core Intel Xeon with AMX (family 6 model 167 under KVM: AVX-512 VNNI/BF16/FP16, amx_tile/bf16/int8), quiet:
    # with its one-row weight prefetch, and int16 products of 3+ rows on AMX int8 tiles (amx_int16.h: int16 at 4 / 32 /
    # 128 rows 14.1 / 53.6 / 230.6 -> 9.9 / 44.2 / 174.9 ms; mixed16's int16 half likewise), and the bf16 step's own
    # driver (bf16_step.h: 41.3 / 121.1 -> 39.3 / 104.5 ms at 32 / 128 rows). oneDNN's bfloat16 GEMM on AMX tiles is
    # 1.61x int16 at 128 rows, 1.14x at 32, 3.7x slower at one row (a GEMM, not a GEMV). bf16 mixes only with int16
    # (MIXES_ONLY_WITH): int16 up to 8 rows and bf16 above. Re-measured with passes of up to 8 rows prefetching their
    # weights (WEIGHT_PREFETCH) and the tiles from 5 rows (int16 at 4 rows 10.3 -> 7.3 ms): the same plan
    "amx": (
        Measured(cpu="Intel(R) Xeon(R) Processor (family 6 model 167)",
                 command="bench/decode_step.py --best --maths float32,int16,mixed,mixed16,bf16,int8 --batches 1,4,32,128",
                 ms={"float32": (12.4, 19.9, 87.1, 362.3), "int16": (4.7, 7.3, 41.0, 163.2), "mixed": (9.0, 14.2, 66.1, 277.9),
                     "mixed16": (4.5, 6.8, 41.1, 187.4), "bf16": (16.8, 18.4, 37.2, 98.6), "int8": (4.4, 6.4, 37.4, 186.6)}),
    ),
    # the 2-core AMD EPYC with AVX-512 VNNI and BF16, no AMX (Zen 4, family 25 model 17), 2026-12-07 evening, after the
    # integer products read their activations by the instruction's broadcast, in a fast spell (DRAM 41-47 GB/s):
    # mixed16 1.77-2.43x float32, 1.39-1.77x mixed and 1.03-1.17x int16, within 0-10% of int8 (which is under the
    # quality bar): mixed16 wins every bucket (tied with int16 at one row, and taken as the arithmetic the other buckets
    # won). That morning, with the int16 products of 5+ rows newly on 512-bit registers (int16_zmm.h): 4.3 / 8.7 / 35.0
    # / 143.0 ms, the same picks (2026-12-03, without int16 timed: 6.7 / 11.5 / 49.6 / 185.3 ms)
    "avx512_vnni": (
        Measured(cpu="AMD EPYC (family 25 model 17)",
                 command="bench/decode_step.py --best --maths float32,int16,mixed,mixed16,int8 --batches 1,4,32,128",
                 ms={"float32": (5.5, 10.7, 68.0, 270.2), "int16": (3.2, 5.0, 36.0, 142.5), "mixed": (4.3, 7.8, 48.7, 192.3),
                     "mixed16": (3.1, 4.4, 30.9, 121.7), "int8": (3.1, 4.0, 27.8, 112.1)}),
    ),
    # the 2-core AVX2-only AMD EPYC (no AVX-512; family 23 model 49), quiet (load average under 1.3), with the head in
    # the one-region step, the lean integer kernels (isa_avx2.h) and the vectorized softmax: mixed16 1.46x / 1.35x /
    # 1.15x / 1.11x mixed at 1 / 4 / 32 / 128 rows and within 2-11% of int8 (under the quality bar): mixed16 wins
    # every bucket (the session before, in the wide kernels' shape: 1.59x / 1.20x / 1.08x / 1.06x, 5.9 / 13.7 /
    # 87.2 / 353.6 ms). Before mixed16 was timed there, mixed (1.04-1.11x float32) was this family's default.
    "avx2": (
        Measured(cpu="AMD EPYC (family 23 model 49)",
                 command="bench/decode_step.py --best --maths float32,mixed,mixed16,int8 --batches 1,4,32,128",
                 ms={"float32": (9.4, 16.1, 96.4, 421.6), "mixed": (7.6, 14.3, 81.9, 317.0), "mixed16": (5.2, 10.6, 71.2, 284.5),
                     "int8": (5.1, 9.8, 63.6, 259.6)}),
        # the 2-core Zen 1 EPYC (family 23 model 1: 256-bit AVX2 as two 128-bit halves, half the float32 peak of
        # the Zen 2 one at a little less bandwidth), the same kernels: steps 1.5-2.2x the Zen 2 one's, compute-bound
        # even at one row; mixed16 1.09-1.65x mixed and within 14-21% of int8 (under the quality bar): mixed16
        # wins every bucket here too
        Measured(cpu="AMD EPYC (family 23 model 1)",
                 command="bench/decode_step.py --best --maths float32,mixed,mixed16,int8 --batches 1,4,32,128",
                 ms={"float32": (19.6, 36.0, 207.9, 836.6), "mixed": (15.0, 28.0, 171.5, 686.7),
                     "mixed16": (9.1, 22.3, 157.8, 628.6), "int8": (7.5, 18.8, 136.8, 549.5)}),
        # the 2-core Zen 3 EPYC (family 25 model 1: AVX2 only, 256-bit multiplies twice a cycle), with its weight
        # prefetch (2048 bytes ahead, passes of up to 2 rows) and the lean groups' register pins: mixed16 1.61-2.14x
        # float32 and 1.21-1.71x mixed, within 4-13% of int8 (under the quality bar): mixed16 wins every bucket (the
        # session's first run, before the prefetch and pins, in a quieter spell: 4.1 / 7.7 / 51.7 / 230.8 ms)
        Measured(cpu="AMD EPYC (family 25 model 1)",
                 command="bench/decode_step.py --best --maths float32,int16,mixed,mixed16,int8 --batches 1,4,32,128",
                 ms={"float32": (9.0, 12.6, 83.0, 358.9), "int16": (4.4, 9.2, 60.6, 262.5), "mixed": (7.2, 10.0, 64.3, 267.1),
                     "mixed16": (4.2, 7.7, 51.4, 219.9), "int8": (4.0, 6.8, 46.3, 210.9)}),
    ),
}


def for_cpu(runs: Sequence[_Run], cpu: str) -> _Run | None:
    """Of one family's measured ``runs`` (anything with a ``cpu`` field: ``Measured``, the speculative verify
    costs), the run of CPU model ``cpu`` itself, else the family's first (a model with the same kernels, measured
    elsewhere), else None. The one rule every per-CPU table of the CPU kernels follows."""
    return next((r for r in runs if r.cpu == cpu), runs[0] if runs else None)


def eligible(agreement: dict[str, tuple[float | None, ...]] | None = None, bar: float = QUALITY_BAR,
             bucket: int | None = None) -> list[str]:
    """The arithmetics whose answers meet the quality bar in bucket ``bucket`` (an index of ``BUCKETS``; None: in
    every bucket) by ``agreement`` (``AGREEMENT``), most exact first."""
    agreement = AGREEMENT if agreement is None else agreement
    which = range(len(BUCKETS)) if bucket is None else (bucket,)
    return [m for m in MATHS if m in agreement and all((a := agreement[m][b]) is not None and a >= bar for b in which)]


def pick(ms: dict[str, tuple[float, ...]], allowed: Sequence[str] | Sequence[Sequence[str]],
         margin: float = MARGIN) -> tuple[str, ...]:
    """One arithmetic per bucket, from the step times ``ms``, of ``allowed`` (most exact first): one list for every
    bucket, or one list per bucket (``eligible(bucket=b)``).

    A bucket's candidates are its allowed arithmetics within ``margin`` of its fastest (the allowed ones ``ms``
    timed; none timed: its most exact): one candidate wins outright; among several (a tie, as far as the
    measurement can tell) the arithmetic most buckets won outright is taken if it is one of them, so that a
    request's answer does not change with its batch's size for nothing, else the most exact."""
    per = [list(allowed)] * len(BUCKETS) if not allowed or isinstance(allowed[0], str) else [list(a) for a in allowed]
    assert len(per) == len(BUCKETS) and all(per), "an allowed arithmetic for every bucket"
    timed = [[m for m in a if m in ms] for a in per]
    cands = [[m for m in t if ms[m][b] <= margin * min(ms[x][b] for x in t)] if t else [per[b][0]] for b, t in enumerate(timed)]
    won = [c[0] for c, t in zip(cands, timed) if len(c) == 1 and len(t) > 1]  # a lone candidate won nothing
    order = [m for m in MATHS if any(m in t for t in timed)]
    usual = max(order, key=lambda m: (won.count(m), -order.index(m))) if order else None  # ties: the most exact
    return tuple(c[0] if len(c) == 1 else (usual if usual in c else c[0]) for c in cands)


@dataclass(frozen=True)
class MathPlan:
    """One arithmetic per ``BUCKETS`` entry, and why."""

    by_bucket: tuple[str, ...]
    reason: str

    def for_batch(self, rows: int) -> str:
        """The arithmetic a batch of ``rows`` rows runs."""
        return next(m for (_, most), m in zip(BUCKETS, self.by_bucket) if most == 0 or rows <= most)

    def tiers(self) -> list[tuple[int, str]]:
        """(most rows, arithmetic) with neighbouring buckets of one arithmetic merged; the last admits any batch."""
        out: list[tuple[int, str]] = []
        for (_, most), m in zip(BUCKETS, self.by_bucket):
            if out and out[-1][1] == m:
                out[-1] = (most, m)
            else:
                out.append((most, m))
        return out

    def format(self) -> str:
        if len(set(self.by_bucket)) == 1:
            return f"{self.by_bucket[0]} math ({self.reason})"
        parts = ", ".join(f"{label}: {m}" for (label, _), m in zip(BUCKETS, self.by_bucket))
        return f"by batch rows {parts} ({self.reason})"


def plan_time(ms: dict[str, tuple[float, ...]], plan: Sequence[str]) -> float:
    """A plan's cost over the buckets: the geometric mean of its step times (each bucket weighs alike, whatever its
    scale); a bucket whose arithmetic ``ms`` did not time counts as infinitely slow."""
    import math

    if any(m not in ms for m in plan):
        return math.inf
    return math.exp(sum(math.log(ms[m][b]) for b, m in enumerate(plan)) / len(plan))


def measured_plan(ms: dict[str, tuple[float, ...]], allowed: Sequence[Sequence[str]]) -> tuple[str, ...]:
    """The plan from step times ``ms`` and each bucket's candidates ``allowed`` (most exact first): ``pick``, then
    ``MIXES_ONLY_WITH``: a plan mixing a listed arithmetic with one outside its partners becomes the faster
    (``plan_time``; within ``MARGIN``, the one without it) of the plan without it and the plan of it and its
    partners only."""
    plan = pick(ms, allowed)
    for m, partners in MIXES_ONLY_WITH.items():
        if m not in plan or set(plan) <= {m, *partners}:
            continue
        without = pick(ms, [[a for a in al if a != m] or ["float32"] for al in allowed])
        only = pick(ms, [[a for a in al if a == m or a in partners] or ["float32"] for al in allowed])
        plan = only if plan_time(ms, only) * MARGIN < plan_time(ms, without) else without
    return plan


def gguf_math(family: str, cpu: str, forced: str | None) -> MathPlan:
    """The GGUF arithmetic per batch size for kernel family ``family`` on CPU model ``cpu``; ``forced`` is
    ``SGLANG_CPU_GGUF_MATH`` (None/``auto``: the measured table). Raises ``ValueError`` naming the variable."""
    forced = (forced or "auto").strip().lower()
    if forced != "auto":
        if forced not in MATHS:
            raise ValueError(f"{MATH_ENV}={forced!r}: use auto or one of {', '.join(MATHS)}")
        return MathPlan((forced,) * len(BUCKETS), f"forced by {MATH_ENV}")
    run = for_cpu(MEASURED.get(family, ()), cpu)
    if run is None:
        return MathPlan(("float32",) * len(BUCKETS), f"no measurement for the {family} family: the exact weights; "
                        f"{MATH_ENV}=mixed, mixed16 or int8 to try the integer kernels")
    allowed = [[m for m in eligible(bucket=b) if m not in HELD] for b in range(len(BUCKETS))]
    if all(a == ["float32"] for a in allowed):
        others = "; ".join(f"{m}: {_short_of_bar(m)}" for m in MATHS if m != "float32")
        return MathPlan(("float32",) * len(BUCKETS), f"the only candidate (top-1 agreement >= {QUALITY_BAR:g}% measured at each "
                        f"batch size, not held): {others}; {MATH_ENV}=mixed, mixed16 or int8 forces the integer kernels")
    plan = measured_plan(run.ms, allowed)
    where = "this CPU" if run.cpu == cpu else f"{run.cpu}, the same family"
    timed = [m for m in MATHS if m in run.ms and any(m in a for a in allowed)]
    mixes = "".join(f"; {m} shares a plan only with {', '.join(p)}" for m, p in MIXES_ONLY_WITH.items() if m in plan)
    return MathPlan(plan, f"fastest measured on {where} ({family}) of {', '.join(timed)}, each where its top-1 agreement "
                    f"is >= {QUALITY_BAR:g}%{mixes}; {MATH_ENV}=float32 keeps the exact weights")


PREFETCH_ENV = "SGLANG_CPU_WEIGHT_PREFETCH"


@dataclass(frozen=True)
class Prefetch:
    """How far ahead of the weight block it multiplies (bytes; 0: not at all) an integer product of at most ``rows``
    rows of x a pass asks for its weights on one CPU model, as ``command`` measured it (a distance is taken only where
    it beats none by more than ``MARGIN``)."""

    cpu: str
    bytes: int
    command: str
    rows: int = 1  # the most rows of x a pass over the weights serves where the distance was measured to pay


class PrefetchSetting(NamedTuple):
    """What the kernels are set to (``weight_prefetch``): ``bytes`` ahead (0: off) in passes of at most ``rows`` rows."""

    bytes: int
    rows: int
    why: str


# Per family, the weight prefetch of each CPU model measured (``for_cpu`` picks, as for MEASURED). Where the
# one-row products are compute-bound (Zen 1 runs 256-bit integer multiplies as two halves on one port) the
# hardware prefetcher leaves the DRAM reads and the arithmetic mostly unoverlapped; where the bandwidth binds
# (Zen 2) 512-2048 bytes ahead bought nothing (docs/benchmarks.md, "Tried and dropped"). On the Zen 1 EPYC
# prefetching at 4 and 16 rows measured neutral, so its passes of 2+ rows are not prefetched; on the AMX Xeon the
# hardware prefetcher leaves 2-8 rows as short of the bandwidth as one (below).
WEIGHT_PREFETCH: dict[str, tuple[Prefetch, ...]] = {
    # the AMX Xeon: one-row steps 5.0 -> 3.4 ms (1.47x) at 4096 bytes ahead, 8192 and 16384 alike (1024: 1.19x, 2048:
    # 1.32x in the run before); with passes of up to 8 rows prefetched too (bench/kernel_ab.py --batch B, the int16
    # vector kernels and the AMX tiles' unpacking): 2 / 4 / 6 rows 7.0 / 8.7 / 9.9 -> 4.7 / 7.6 / 8.8 ms
    "amx": (Prefetch("Intel(R) Xeon(R) Processor (family 6 model 167)", 4096,
                     "bench/decode_step.py --prefetch 0,4096,8192,16384 --batches 1,4; bench/kernel_ab.py --batch 2,4,6", rows=8),),
    # Zen 4 (family 25 model 17), 2026-12-07, bench/decode_step.py alternating 0 / 2048 / 4096 / 8192 bytes ahead, median
    # of 45 steps: 1 / 2 / 4 / 8 / 9 / 16 rows 1.03x / 1.10x / 1.03x / 1.07x / 1.06x / 1.08x at 4096 (2048 and 8192
    # alike), 32 rows 1.04x, 64 level; a second run 1-6 rows 1.04x / 1.09x / 1.05x / 1.04x / 1.07x / 1.06x. Passes
    # serve at most 8 rows of x, so passes of up to 8 is every batch
    "avx512_vnni": (Prefetch("AMD EPYC (family 25 model 17)", 4096,
                             "bench/decode_step.py --prefetch 0,2048,4096,8192 --prefetch-rows 16 --batches 1,2,4,8,9,16", rows=8),),
    "avx2": (
        Prefetch("AMD EPYC (family 23 model 49)", 0, "hand-written prefetch 512-2048 bytes ahead in the one-row products "
                 "(8fd426a), timed against none: no gain; not re-measured with bench/decode_step.py --prefetch"),
        # one-row steps 1.09-1.18x in four alternating runs; 1024-8192 bytes alike, 512 alike in one sweep, short in another
        Prefetch("AMD EPYC (family 23 model 1)", 2048, "bench/decode_step.py --prefetch 0,512,1024,2048,4096 --batches 1"),
        # Zen 3 (family 25 model 1): 2048 bytes ahead, one / two / three / four rows 1.12x / 1.07x / 1.04x / 1.01x (medians
        # of 45 alternating steps; 1024-8192 bytes alike at one row): passes of up to 2 rows
        Prefetch("AMD EPYC (family 25 model 1)", 2048,
                 "bench/decode_step.py --prefetch 0,1024,2048,4096,8192 --batches 1,2,3,4,6 (with rows=8 while measuring)", rows=2),
    ),
}
PREFETCH_MAX = 65536  # the kernel's own bound (set_weight_prefetch)
PREFETCH_MAX_ROWS = 64  # likewise


def weight_prefetch(family: str, cpu: str, forced: str | None) -> PrefetchSetting:
    """The weight prefetch of the integer products of kernel family ``family`` on CPU model ``cpu``; ``forced`` is
    ``SGLANG_CPU_WEIGHT_PREFETCH`` (None/``auto``: the measured table; a forced distance applies to the passes the
    table names, one row where the CPU model was not measured). Raises ``ValueError`` naming the variable."""
    forced = (forced or "auto").strip().lower()
    run = for_cpu(WEIGHT_PREFETCH.get(family, ()), cpu)
    rows = run.rows if run is not None else 1
    if forced != "auto":
        if not (forced.isascii() and forced.isdigit()) or int(forced) % 64 or int(forced) > PREFETCH_MAX:
            raise ValueError(f"{PREFETCH_ENV}={forced!r}: use auto, 0 (off) or bytes ahead, a multiple of 64 up to {PREFETCH_MAX}")
        return PrefetchSetting(int(forced), rows, f"forced by {PREFETCH_ENV}")
    if run is None:
        return PrefetchSetting(0, rows, f"not measured for the {family} family; {PREFETCH_ENV}=2048 tries it")
    where = "this CPU" if run.cpu == cpu else f"{run.cpu}, the same family"
    return PrefetchSetting(run.bytes, rows, f"measured on {where}; {PREFETCH_ENV}=0 turns it off, =N sets N bytes")


def host_weight_prefetch(family: str) -> PrefetchSetting:
    """``weight_prefetch`` for this process's CPU and environment. Who calls: the kernel loader, ``sglang platform``."""
    from sglang.host import cpu_model

    return weight_prefetch(family, cpu_model(), os.environ.get(PREFETCH_ENV))


def format_prefetch(setting: PrefetchSetting) -> str:
    """``weight_prefetch``'s answer as the start-up log and ``sglang platform`` print it."""
    n, rows, why = setting
    return f"{'off' if n == 0 else f'{n} bytes ahead' + ('' if rows == 1 else f' in passes of up to {rows} rows')} ({why})"


def auto_kv_dtype(plan: MathPlan) -> str:
    """The KV cache's dtype under ``--kv-cache-dtype auto`` for a float32 model computing on the GGUF's blocks under
    ``plan``: ``bfloat16`` (half the bytes decode attention reads, which at 16-64 requests outgrow the weights)
    wherever the arithmetic is not float32 at every batch size, else ``float32``, so that
    ``SGLANG_CPU_GGUF_MATH=float32`` stays exact end to end. The AGREEMENT of ``mixed`` is measured with this KV."""
    return "float32" if set(plan.by_bucket) == {"float32"} else "bfloat16"


def _short_of_bar(math: str) -> str:
    """Where ``math``'s agreement misses the bar or was not measured (bench/quality.py --group measures it), or
    why it is held."""
    if math in HELD and any(math in eligible(bucket=b) for b in range(len(BUCKETS))):
        return HELD[math]
    figures = AGREEMENT.get(math, (None,) * len(BUCKETS))
    low = [f"{a:g}% at {label} rows" for (label, _), a in zip(BUCKETS, figures) if a is not None and a < QUALITY_BAR]
    unmeasured = [label for (label, _), a in zip(BUCKETS, figures) if a is None]
    return ", ".join(low + ([f"not measured at {', '.join(unmeasured)} rows"] if unmeasured else []))


def host_gguf_math(family: str) -> MathPlan:
    """``gguf_math`` for this process's CPU and environment. Who calls: the weight-format pass, ``sglang platform``."""
    from sglang.host import cpu_model

    return gguf_math(family, cpu_model(), os.environ.get(MATH_ENV))
