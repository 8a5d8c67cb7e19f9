"""The fused decode step with and without a competitor on its last core: what a served step loses to the
front-ends' wakes, in process, and what the step's redo of a stalled thread's share wins back.

Run: .venv/bin/python bench/step_interference.py [--batches 1,4] [--burst-us 700] [--period-us 3500] [--steps 400]

Served at concurrency 1 the scheduler's step threads hold both cores while the detokenizer, the HTTP server and
the client run once a token on the last core (``managers/cpu_binding.py``): about 0.7 ms of CPU a token on the
2-core EPYCs, which preempts the step's thread there. Here the step's team is bound as the server binds it (thread
t on core t), and a competitor process on the last core is busy ``--burst-us`` every ``--period-us`` (sleeping in
between), the same load without the network. For each batch size it prints the median and mean step in four
settings, alternating step by step so that a drifting machine slows them alike: the competitor off or on, and the
step's redo (``set_step_redo``: a thread that finds the other's share of a phase overdue computes it itself, the
same bits) off or on. ``redo`` only changes a step of at most ``step_redo_rows()`` rows.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

COMPETITOR = """
import os, sys, time
os.sched_setaffinity(0, {int(sys.argv[1])})
burst, idle = float(sys.argv[2]) / 1e6, (float(sys.argv[3]) - float(sys.argv[2])) / 1e6
while True:
    t = time.perf_counter()
    while time.perf_counter() - t < burst:
        pass
    time.sleep(idle)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", default="1,4")
    ap.add_argument("--prefix", type=int, default=150)
    ap.add_argument("--burst-us", type=float, default=700.0)
    ap.add_argument("--period-us", type=float, default=3500.0)
    ap.add_argument("--steps", type=int, default=400, help="steps per setting and batch size")
    args = ap.parse_args()
    os.environ["SGLANG_QUIET_LOAD"] = "1"
    import torch

    from inproc_scheduler import scheduler  # bench/ is the script's directory
    from sglang.srt.layers.cpu_kernels.build import LOADED
    from sglang.srt.model_executor.forward_batch_info import ForwardMode, ModelWorkerBatch

    batches = [int(b) for b in args.batches.split(",")]
    runner = scheduler(fused_decode="on", max_total_tokens=1 + max(batches) * (args.prefix + 1),
                       max_running_requests=max(batches)).tp_worker.model_runner
    module = next(iter(LOADED.values()))
    cores = sorted(os.sched_getaffinity(0))
    module.bind_team(cores)
    has_redo = hasattr(module, "set_step_redo")
    redo_modes = (False, True) if has_redo else (False,)
    print(f"{len(cores)} cores, team bound to {cores}; competitor on core {cores[-1]}: {args.burst_us:.0f} us busy every "
          f"{args.period_us:.0f} us; {args.prefix} cached tokens a request; {args.steps} steps a setting"
          + (f"; redo serves steps of up to {module.step_redo_rows()} rows" if has_redo else "; this library has no redo"))
    print(f"{'batch':>5} {'competitor':>10} {'redo':>5} {'median ms':>10} {'mean ms':>8} {'shares redone a step':>21}")
    with torch.inference_mode():
        for batch in batches:
            pages = [[1 + j * batch + i for j in range(args.prefix + 1)] for i in range(batch)]
            fb = runner.build_forward_batch(
                ModelWorkerBatch(ForwardMode.DECODE, [[5]] * batch, [args.prefix] * batch, pages, [None] * batch))
            settings = [(c, r) for c in (False, True) for r in redo_modes]
            times: dict[tuple[bool, bool], list[float]] = {s: [] for s in settings}
            taken: dict[tuple[bool, bool], int] = {s: 0 for s in settings}
            for competitor in (False, True):
                proc = None
                if competitor:
                    proc = subprocess.Popen([sys.executable, "-c", COMPETITOR, str(cores[-1]), str(args.burst_us),
                                             str(args.period_us)])
                    time.sleep(0.5)
                try:
                    for i in range(args.steps + 5):
                        for redo in redo_modes:
                            if has_redo:
                                module.set_step_redo(redo)
                            before = module.step_redo_taken() if has_redo else 0
                            t0 = time.perf_counter()
                            runner.fused_decode.run(fb)
                            if i >= 5:
                                times[(competitor, redo)].append((time.perf_counter() - t0) * 1e3)
                                taken[(competitor, redo)] += (module.step_redo_taken() - before) if has_redo else 0
                finally:
                    if proc is not None:
                        proc.kill()
                        proc.wait()
            for (competitor, redo), t in times.items():
                print(f"{batch:>5} {'on' if competitor else 'off':>10} {'on' if redo else 'off':>5} "
                      f"{statistics.median(t):>10.3f} {statistics.fmean(t):>8.3f} {taken[(competitor, redo)] / len(t):>21.2f}",
                      flush=True)
    if has_redo:
        module.set_step_redo(True)


if __name__ == "__main__":
    main()
