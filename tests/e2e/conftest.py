from __future__ import annotations

import os

import pytest

import sglang
from helpers.reference import hf_fp32_model


@pytest.fixture(scope="session")
def engine():
    """One real engine (spawned scheduler + detokenizer) on the default model, fp32."""
    os.environ["SGLANG_QUIET_LOAD"] = "1"
    e = sglang.Engine(dtype="float32", log_level="warning")
    yield e
    e.shutdown()



@pytest.fixture(scope="session")
def hf_fp32():
    """Hugging Face transformers on the same GGUF, float32: the reference of the parity tests."""
    return hf_fp32_model()
