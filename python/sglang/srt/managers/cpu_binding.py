"""Which cores the CPU decode step's threads and the server's front-end processes run on: the one place that decides.

``SGLANG_CPU_OMP_THREADS_BIND`` (upstream SGLang's variable) names the cores, one range per TP rank separated by
``|`` (``"0-39|43-82"``); each rank's step runs one thread per named core, thread t on the t-th. Unset (or
``auto``), a server with a single scheduler whose step uses every core the process may run on binds thread t to the
t-th of those cores, and puts the HTTP server and the detokenizer on the core of the step's last thread; ``off``
binds nothing. Why: on the 2-core machines the HTTP server, the detokenizer and the client wake once per streamed
token, taking a core for 0.1-0.3 ms. Left to the kernel, a wake lands as often on the core of the scheduler's main
thread, which between two steps runs the scheduler's Python (the next step waits for it), as on the step's other
thread, which then only spins; bound, the front-ends wake on the spinning thread's core (on the Zen 4 EPYC,
concurrency 1 streamed 3.6% faster, 80 requests alternating with an unbound server). No torch: the launcher and the
detokenizer call it too.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from sglang.srt.server_args import ServerArgs

logger = logging.getLogger(__name__)

ENV = "SGLANG_CPU_OMP_THREADS_BIND"


class CpuBindingError(ValueError):
    """``SGLANG_CPU_OMP_THREADS_BIND`` cannot be applied; the message names the variable, the value and the fix."""


@dataclass(frozen=True)
class CpuBinding:
    """``step``: the step threads' cores, thread t on ``step[t]``; ``front``: the cores of the HTTP server and the
    detokenizer (None: they are left where they are)."""

    step: tuple[int, ...]
    front: tuple[int, ...] | None


def allowed_cpus() -> tuple[int, ...]:
    """The cores this process may run on (taskset, cgroups), sorted."""
    if hasattr(os, "sched_getaffinity"):
        return tuple(sorted(os.sched_getaffinity(0)))
    return tuple(range(os.cpu_count() or 1))


def _parse_range(text: str, raw: str) -> tuple[int, ...]:
    cores: list[int] = []
    for part in text.split(","):
        part = part.strip()
        lo, _, hi = part.partition("-")
        try:
            a, b = int(lo), int(hi) if hi else int(lo)
        except ValueError:
            raise CpuBindingError(f"{ENV}={raw!r}: {part!r} is not a core or a range of cores like 0-3; "
                                  f"give one range per TP rank separated by '|', or unset it") from None
        if a < 0 or b < a:
            raise CpuBindingError(f"{ENV}={raw!r}: {part!r} is not a range of cores (low-high, low <= high)")
        cores.extend(range(a, b + 1))
    if len(set(cores)) != len(cores):
        raise CpuBindingError(f"{ENV}={raw!r}: {text!r} names a core twice")
    return tuple(cores)


def plan_binding(server_args: ServerArgs, tp_rank: int = 0, dp_rank: int = 0, threads: int | None = None,
                 allowed: tuple[int, ...] | None = None) -> CpuBinding | None:
    """The binding of TP rank ``tp_rank`` of replica ``dp_rank`` (None: nothing is bound). ``threads``: the step's
    thread count when the launcher fixed it; ``allowed``: the cores the process may use (default: this process's).
    Raises :class:`CpuBindingError` for a value of ``SGLANG_CPU_OMP_THREADS_BIND`` that cannot apply."""
    raw = os.environ.get(ENV, "").strip()
    if raw.lower() == "off" or server_args.device != "cpu":
        return None
    allowed = allowed_cpus() if allowed is None else allowed
    if raw and raw.lower() != "auto":
        ranges = raw.split("|")
        index = dp_rank * server_args.tp_size + tp_rank
        if index >= len(ranges):
            raise CpuBindingError(f"{ENV}={raw!r} names {len(ranges)} core range(s) but rank {index} needs one: give one "
                                  f"range per TP rank of each replica ({server_args.tp_size * server_args.dp_size}), separated by '|'")
        cores = _parse_range(ranges[index], raw)
        outside = sorted(set(cores) - set(allowed))
        if outside:
            raise CpuBindingError(f"{ENV}={raw!r}: cores {outside} are not among those this process may use {list(allowed)}")
        return CpuBinding(cores, None)
    single = server_args.tp_size * server_args.dp_size == 1 and server_args.nnodes == 1 and not server_args.use_ray
    n = threads or len(allowed)
    if not single or len(allowed) < 2 or n != len(allowed):
        return None  # several schedulers share the cores, or the step leaves some free: the kernel's placement is fine
    return CpuBinding(allowed, (allowed[-1],))


def bind_process(cores: tuple[int, ...]) -> None:
    """Every thread of this process onto ``cores`` (threads it starts later inherit the caller's binding); a no-op
    where the OS has no affinity call."""
    if not hasattr(os, "sched_setaffinity"):
        return
    tids = os.listdir("/proc/self/task") if os.path.isdir("/proc/self/task") else ["0"]
    for tid in tids:
        try:
            os.sched_setaffinity(int(tid), cores)
        except (ProcessLookupError, OSError):
            pass  # a thread that ended meanwhile, or a core the kernel refuses: best effort


def bind_front(server_args: ServerArgs, who: str) -> None:
    """Put this front-end process (the HTTP server, the detokenizer) where :func:`plan_binding` says; a no-op where
    it binds nothing."""
    plan = plan_binding(server_args)
    if plan is not None and plan.front is not None:
        bind_process(plan.front)
        logger.debug("%s bound to core(s) %s (%s=off leaves it unbound)", who, list(plan.front), ENV)


def bind_step(plan: CpuBinding) -> int:
    """Bind the decode step's team as ``plan`` says, in a scheduler whose model runner has loaded the CPU kernels
    (their OpenMP pool is the step's team; the calling thread is its member 0), and the process's other threads to
    ``plan.front`` when it names cores. Returns the team's threads bound (0 when no kernel library is loaded: nothing
    runs a team then)."""
    from sglang.srt.layers.cpu_kernels.build import LOADED

    module = next(iter(LOADED.values()), None)  # one OpenMP pool serves every loaded library
    if module is None:
        return 0
    if plan.front is not None:  # the scheduler's helper threads (its ZMQ I/O thread wakes once a token) with the front-ends
        bind_process(plan.front)
    return int(module.bind_team(list(plan.step)))  # then the team, the calling thread among it
