"""The engine's Prometheus metrics (``prometheus_client``, as SGLang uses).

One :class:`EngineMetrics` per tokenizer manager, on its own registry, so
several engines in one process never share series. Counters and histograms
are updated as requests flow; load gauges are read from the scheduler's last
stats when ``/metrics`` is scraped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

TTFT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
ITL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _LoadGauges(Collector):
    """Gauges computed at scrape time from ``stats()``: each data-parallel replica's last report (or None),
    one sample per replica labelled ``dp_rank``."""

    def __init__(self, stats: Callable[[], list[Any]]) -> None:
        self.stats = stats

    def collect(self) -> Iterator[GaugeMetricFamily]:
        reports = self.stats()
        gauges = {
            "num_running_reqs": ("requests being decoded", lambda s: s.num_running),
            "num_queue_reqs": ("requests waiting for KV pages or a batch slot", lambda s: s.num_waiting),
            "token_usage": ("fraction of KV pages in use (cached included)", lambda s: round(s.kv_used_pages / s.kv_total_pages, 4)),
            "used_pages": ("KV pages in use (cached included)", lambda s: s.kv_used_pages),
            "cached_pages": ("KV pages held by the prefix cache", lambda s: s.cached_pages),
            "lora_pool_slots_used": ("LoRA adapter pool slots holding an adapter", lambda s: s.lora_slots_used),
            "lora_pool_slots_total": ("LoRA adapter pool slots (--max-loras-per-batch; 0 without --enable-lora)", lambda s: s.lora_slots_total),
        }
        if any(s is not None and s.spec_accept_length is not None for s in reports):  # speculative decoding is on
            gauges["spec_accept_length"] = ("tokens a verify step emits on average (bonus token included), since /flush_cache",
                                            lambda s: s.spec_accept_length or 0.0)
            gauges["spec_accept_rate"] = ("accepted / proposed draft tokens, since /flush_cache", lambda s: s.spec_accept_rate or 0.0)
        for name, (help_text, read) in gauges.items():
            family = GaugeMetricFamily(f"sglang_{name}", help_text, labels=["dp_rank"])
            for dp, s in enumerate(reports):
                family.add_metric([str(dp)], read(s) if s else 0)
            yield family
        names = sorted({k for s in reports if s for k in s.disagg})  # a prefill or decode server's queues (--disaggregation-mode)
        for name in names:
            family = GaugeMetricFamily(f"sglang_{name}", f"disaggregation: {name.replace('_', ' ')}", labels=["dp_rank"])
            for dp, s in enumerate(reports):
                family.add_metric([str(dp)], s.disagg.get(name, 0) if s else 0)
            yield family


class EngineMetrics:
    """Counters, latency histograms and load gauges of one engine."""

    def __init__(self, stats: Callable[[], list[Any]]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("sglang_requests", "Requests admitted to the engine", registry=r)
        self.prompt_tokens = Counter("sglang_prompt_tokens", "Prompt tokens admitted", registry=r)
        self.generation_tokens = Counter("sglang_generation_tokens", "Tokens generated", registry=r)
        self.aborted = Counter("sglang_aborted_requests", "Requests aborted (client gone or abort asked), each once", registry=r)
        self.failed = Counter("sglang_request_errors", "Requests that ended with an error, by route and kind "
                              "(validation: rejected with a 4xx; engine: failed while served)", ["route", "kind"], registry=r)
        self.ttft = Histogram("sglang_time_to_first_token_seconds", "Time to first token", buckets=TTFT_BUCKETS, registry=r)
        self.itl = Histogram("sglang_inter_token_latency_seconds", "Time between streamed chunks", buckets=ITL_BUCKETS, registry=r)
        r.register(_LoadGauges(stats))

    def count_error(self, route: str, kind: str) -> None:
        self.failed.labels(route=route, kind=kind).inc()

    def render(self) -> bytes:
        """The Prometheus text exposition of every series."""
        return generate_latest(self.registry)
