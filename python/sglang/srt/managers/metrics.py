"""Prometheus text exposition for the tokenizer manager's counters and histograms."""

from __future__ import annotations

import bisect
import threading

TTFT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
ITL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class Histogram:
    def __init__(self, name: str, help_text: str, buckets: tuple[float, ...]) -> None:
        self.name, self.help, self.buckets = name, help_text, buckets
        self.counts = [0] * (len(buckets) + 1)
        self.sum = 0.0
        self.lock = threading.Lock()

    def observe(self, v: float) -> None:
        with self.lock:
            self.counts[bisect.bisect_left(self.buckets, v)] += 1
            self.sum += v

    def render(self) -> list[str]:
        out = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]
        acc = 0
        for le, c in zip((*self.buckets, float("inf")), self.counts):
            acc += c
            out.append(f'{self.name}_bucket{{le="{"+Inf" if le == float("inf") else le}"}} {acc}')
        out += [f"{self.name}_sum {self.sum}", f"{self.name}_count {acc}"]
        return out


def render_metrics(counters: dict[str, int], gauges: dict[str, float], histograms: list[Histogram]) -> str:
    lines: list[str] = []
    for name, v in counters.items():
        lines += [f"# TYPE sglang_{name}_total counter", f"sglang_{name}_total {v}"]
    for name, v in gauges.items():
        lines += [f"# TYPE sglang_{name} gauge", f"sglang_{name} {v}"]
    for h in histograms:
        lines += h.render()
    return "\n".join(lines) + "\n"
