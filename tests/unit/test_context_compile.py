"""Bag leaves, parallel config leaves and graph-visible forward flags trace under
torch.compile(fullgraph=True) with no graph break, and overrides are observed."""

from __future__ import annotations

import pytest
import torch

from sglang.srt.runtime_context import get_context, get_exec, get_forward, get_parallel, get_schedule, override_server_args


@pytest.fixture
def ctx():
    with override_server_args(chunked_prefill_size=8, nnodes=1, torch_compile_max_bs=4) as sa:
        yield sa


def step(x: torch.Tensor) -> torch.Tensor:
    y = x * get_schedule().chunked_prefill_size
    if get_exec().compile.torch_compile_max_bs > 2:
        y = y + 1
    y = y * get_parallel().nnodes
    if get_forward().enable_multi_stream:
        y = -y
    return y


def test_parallel_config_leaves_trace_under_torch_compile(ctx):
    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend="eager")
    x = torch.ones(3)
    assert torch.equal(compiled(x), torch.full((3,), 9.0))
    get_context().override("test", chunked_prefill_size=2)
    assert torch.equal(compiled(x), torch.full((3,), 3.0))  # the override is observed
    with get_forward().scoped(enable_multi_stream=True):
        assert torch.equal(compiled(x), torch.full((3,), -3.0))
    with get_exec().compile.override(torch_compile_max_bs=1):
        assert torch.equal(compiled(x), torch.full((3,), 2.0))
