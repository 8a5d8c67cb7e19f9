from __future__ import annotations

import os
from pathlib import Path

import pytest

# Tests choose their own SGLANG_* settings; a developer's shell must not leak in.
for _k in [k for k in os.environ if k.startswith("SGLANG_")]:
    del os.environ[_k]
# The suite's greedy answers and parity bounds (Hugging Face float32 to 1e-3, eager == fused, batched ==
# single, speculative == plain) are the exact arithmetic's: every engine a test starts computes the GGUF's
# Q4 blocks in float32 unless the test unsets this. The default, the measured plan of
# ``cpu_kernels/isa.py`` (int8 for some layers on some CPUs), has its own tests, which unset it
# (tests/e2e/test_default_gguf_math.py, tests/integration/test_integer_kernels.py, tests/e2e/test_cli_platform.py).
os.environ["SGLANG_CPU_GGUF_MATH"] = "float32"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tiers by directory: tests/unit needs nothing (``make test-fast``); tests/integration is ``slow``
    (fresh interpreters, real distributions; files add ``compiler`` or ``model``); tests/e2e is ``e2e``
    and ``model`` (a real engine or server on the default model)."""
    for item in items:
        parts = Path(str(item.fspath)).parts
        if "e2e" in parts:
            item.add_marker(pytest.mark.e2e)
            item.add_marker(pytest.mark.model)
        elif "integration" in parts:
            item.add_marker(pytest.mark.slow)
