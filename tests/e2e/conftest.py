from __future__ import annotations

import os

import pytest

import sglang


@pytest.fixture(scope="session")
def engine():
    """One real engine (spawned scheduler + detokenizer) on the default model, fp32."""
    os.environ["SGLANG_QUIET_LOAD"] = "1"
    e = sglang.Engine(dtype="float32", log_level="warning")
    yield e
    e.shutdown()
