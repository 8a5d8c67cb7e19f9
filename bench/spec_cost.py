"""What a speculative verify row costs on this machine: the numbers behind ``speculative/draft_policy.py``.

One scheduler in this process (the default model unless ``--dtype``/``--quantization`` say otherwise),
one request with ``--cached`` tokens of KV. For each width ``M`` it times one forward of ``M`` rows:
a ``TARGET_VERIFY`` of the request's last token and ``M - 1`` drafts (what batch 1 speculating pays),
and a DECODE step of ``M`` requests (what a batch of ``M`` pays without speculation). Widths are
interleaved round after round and the fastest of the rounds kept (the least disturbed on a shared machine); everything is printed relative to one decode row.

    .venv/bin/python bench/spec_cost.py [--widths 1,2,...] [--rounds 7]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from inproc_scheduler import scheduler


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--widths", default="1,2,3,4,5,6,8,10,12,16")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--cached", type=int, default=300)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--quantization", default=None)
    args = ap.parse_args()
    from sglang.srt.managers.io_struct import TokenizedGenerateReqInput
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    extra = {"quantization": args.quantization} if args.quantization else {}
    s = scheduler(dtype=args.dtype, disable_radix_cache=True, max_total_tokens=32768, **extra)
    widths = [int(w) for w in args.widths.split(",")]
    n_req = max(widths)
    for i in range(n_req):  # prefill n_req requests of --cached tokens, one decode token each
        ids = [(17 * i + 31 * j) % 4000 + 100 for j in range(args.cached)]
        s.add_request(TokenizedGenerateReqInput(f"c{i}", ids, {"temperature": 0, "max_new_tokens": 1 << 20, "ignore_eos": True}))
    while s.waiting or s.chunked_req:
        s.step()
    reqs = list(s.running)
    for r in reqs:
        assert s._ensure_pages(r, r.kv_len + 1 + n_req)
    verify_t: dict[int, list[float]] = {m: [] for m in widths}
    decode_t: dict[int, list[float]] = {m: [] for m in widths}
    for _ in range(args.rounds):
        for m in widths:
            b = ScheduleBatch(ForwardMode.TARGET_VERIFY, [reqs[0]], [m], [[(7 * j) % 4000 + 100 for j in range(m - 1)]])
            t0 = time.perf_counter()
            s.run_batch(b)
            verify_t[m].append(time.perf_counter() - t0)
            b = ScheduleBatch(ForwardMode.DECODE, reqs[:m], [1] * m)
            t0 = time.perf_counter()
            s.run_batch(b)  # KV of the same slot rewritten: nothing advances, every round times the same step
            decode_t[m].append(time.perf_counter() - t0)
    t1 = min(decode_t[1])
    print(f"one decode row: {t1 * 1e3:.2f} ms ({args.cached} cached tokens, dtype {args.dtype})")
    print(f"{'rows':>4} {'verify ms':>10} {'verify/T1':>10} {'per extra row':>14} {'decode ms':>10} {'decode/T1':>10}")
    for m in widths:
        v, d = min(verify_t[m]), min(decode_t[m])
        per = (v / t1 - 1) / (m - 1) if m > 1 else 0.0
        print(f"{m:>4} {v * 1e3:>10.2f} {v / t1:>10.2f} {per:>14.3f} {d * 1e3:>10.2f} {d / t1:>10.2f}")


if __name__ == "__main__":
    main()
