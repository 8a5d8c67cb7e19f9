"""What verify steps cost as NGRAM speculation actually runs them, in decode rows: ``bench/speculative.py``'s
workloads in this process with ``--speculative-algorithm NGRAM`` (greedy, 96 tokens, the store flushed per
request), every forward timed by its rows (a plain decode step is 1 row, a verify ``1 + drafts``), each width's
median over the median plain step of the same run.

``bench/spec_cost.py`` times widths back to back, so its decode row follows a wide step; here verifies sit among
the plain steps they interrupt, as in a server. On the AMX Xeon the two differ: its plain step here is 3.5 ms
against spec_cost's 5.0, so spec_cost's table priced verify rows ~30% cheaper than the server pays them.

    .venv/bin/python bench/spec_flow_cost.py [--rounds 2] [extra server flags...]
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from speculative import WORKLOADS


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2)
    args, extra = ap.parse_known_args()
    from sglang.srt.managers.io_struct import TokenizedGenerateReqInput
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.runtime_context import get_context
    from sglang.srt.server_args import ServerArgs
    from sglang.utils.process import free_port

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    sa = ServerArgs.from_cli_args(parser.parse_args(["--log-level", "warning", "--speculative-algorithm", "NGRAM", *extra]))
    get_context().publish(sa, role="scheduler", warn=False)
    s = Scheduler(sa, 0, 0, f"tcp://127.0.0.1:{free_port()}")
    times: dict[int, list[float]] = collections.defaultdict(list)
    run = s.run_batch

    def timed(batch: Any) -> Any:  # the scheduler's own run_batch, timed by its rows
        t0 = time.perf_counter()
        out = run(batch)
        if batch.mode in (ForwardMode.DECODE, ForwardMode.TARGET_VERIFY) and len(batch.reqs) == 1:
            rows = 1 if batch.mode is ForwardMode.DECODE else 1 + len(batch.drafts[0])
            times[rows].append(time.perf_counter() - t0)
        return out

    s.run_batch = timed
    for _ in range(args.rounds):
        for prompts in WORKLOADS.values():
            for text in prompts:
                ids = s.tokenizer.encode(s.tokenizer.apply_chat_template([{"role": "user", "content": text}]))
                if s.tree is not None:
                    s.tree.reset()
                s.spec.flush()
                s.add_request(TokenizedGenerateReqInput("r", ids, {"temperature": 0, "max_new_tokens": 96}))
                while s.has_work():
                    s.step()
                s.outbox.clear()
    t1 = statistics.median(times[1])
    print(f"plain decode step: median {t1 * 1e3:.2f} ms over {len(times[1])}")
    print(f"{'rows':>4} {'steps':>6} {'median ms':>10} {'decode rows':>12}")
    for rows in sorted(times):
        m = statistics.median(times[rows])
        print(f"{rows:>4} {len(times[rows]):>6} {m * 1e3:>10.2f} {m / t1:>12.2f}")


if __name__ == "__main__":
    main()
