"""``in_background``: a daemon thread whose outcome arrives through a future."""

from __future__ import annotations

import threading

import pytest

from sglang.utils.background import in_background


def test_the_result_and_the_exception_come_through_the_future_from_a_daemon_thread():
    seen = {}

    def work(x: int) -> int:
        t = threading.current_thread()
        seen["daemon"], seen["name"] = t.daemon, t.name
        return x * 2

    assert in_background(work, 21, name="bg-test").result(timeout=10) == 42
    assert seen == {"daemon": True, "name": "bg-test"}

    def fail() -> None:
        raise ValueError("bad tokenizer path")

    with pytest.raises(ValueError, match="bad tokenizer path"):
        in_background(fail, name="bg-fail").result(timeout=10)
