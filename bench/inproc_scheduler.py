"""A scheduler built in this process for the benchmark scripts: no launcher, no HTTP."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any


def scheduler(**server_args: Any) -> Any:
    """Publish ``ServerArgs(log_level="warning", **server_args)`` as the scheduler's and build a Scheduler
    (rank 0, its distributed store on a free loopback port). Call once per process, or after
    ``reset_context()``: publishing is once per context."""
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.runtime_context import publish
    from sglang.srt.server_args import ServerArgs
    from sglang.utils.process import free_port

    sa = ServerArgs(**{"log_level": "warning", **server_args})
    publish(sa, role="scheduler")
    return Scheduler(sa, 0, 0, f"tcp://127.0.0.1:{free_port()}")


@contextlib.contextmanager
def gguf_math(config: str) -> Iterator[str]:
    """``CONFIG[@MATH]``: yield CONFIG with ``SGLANG_CPU_GGUF_MATH=MATH`` (``float32`` / ``int8``) set meanwhile, so one
    run can A/B the GGUF kernels' arithmetic (an engine's processes inherit it when they start)."""
    config, _, math = config.partition("@")
    old = os.environ.get("SGLANG_CPU_GGUF_MATH")
    if math:
        os.environ["SGLANG_CPU_GGUF_MATH"] = math
    try:
        yield config
    finally:
        if math:
            os.environ.pop("SGLANG_CPU_GGUF_MATH", None) if old is None else os.environ.__setitem__("SGLANG_CPU_GGUF_MATH", old)
