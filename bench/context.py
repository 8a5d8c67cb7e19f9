"""Config-bag leaf reads against plain attribute reads, and an override.

Run: .venv/bin/python bench/context.py
"""

from __future__ import annotations

import timeit

from sglang.srt.runtime_context import get_context, get_schedule, override_server_args

N = 1_000_000
REPEAT = 15


class Plain:
    def __init__(self) -> None:
        self.chunked_prefill_size = 512


def main() -> None:
    with override_server_args(chunked_prefill_size=512):
        plain = Plain()
        bag = get_schedule()
        cases = {
            "plain attribute read (obj.x)": lambda: plain.chunked_prefill_size,
            "bag leaf read (bag.x, bag held)": lambda: bag.chunked_prefill_size,
            "accessor + leaf (get_schedule().x)": lambda: get_schedule().chunked_prefill_size,
        }
        best = {k: float("inf") for k in cases}
        for _ in range(REPEAT):
            for name, fn in cases.items():
                best[name] = min(best[name], timeit.timeit(fn, number=N) / N * 1e9)
        ctx = get_context()
        t = min(timeit.repeat(lambda: ctx.override("bench", chunked_prefill_size=256), number=10_000, repeat=5)) / 10_000 * 1e9
    width = max(map(len, cases))
    for name, ns in best.items():
        print(f"{name:<{width}}  {ns:6.1f} ns")
    print(f"{'get_context().override(source, x=...)':<{width}}  {t:6.0f} ns")
    print()
    print(f"bag leaf / plain attribute:       {best['bag leaf read (bag.x, bag held)'] / best['plain attribute read (obj.x)']:.2f}x (target <= 2x)")
    print(f"accessor + leaf / plain attribute: {best['accessor + leaf (get_schedule().x)'] / best['plain attribute read (obj.x)']:.2f}x")


if __name__ == "__main__":
    main()
