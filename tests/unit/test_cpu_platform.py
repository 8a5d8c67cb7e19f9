"""The built-in CPU platform implements every device operation for real."""

from __future__ import annotations

import random

import pytest
import torch

from sglang.srt.mem_cache.allocator import PagedTokenToKVPoolAllocator
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
from sglang.srt.model_executor.graph_runner import EagerGraphRunner
from sglang.srt.platforms import PlatformError
from sglang.srt.platforms.cpu import CpuSRTPlatform


@pytest.fixture
def cpu() -> CpuSRTPlatform:
    return CpuSRTPlatform()


def test_identity(cpu):
    assert cpu.is_cpu() and not cpu.is_cuda_alike() and not cpu.is_out_of_tree()
    assert repr(cpu) == "CpuSRTPlatform(device=cpu)"


def test_device_operations(cpu):
    assert cpu.get_device(0) == torch.device("cpu")
    assert cpu.set_device(0) is None
    assert cpu.get_device_name() and cpu.get_device_uuid().startswith("cpu-")
    assert cpu.get_device_capability() is None
    free, total = cpu.get_available_memory()
    assert 0 < free <= total == cpu.get_device_total_memory()
    assert cpu.get_current_memory_usage() > 10 * 2**20  # this interpreter with torch loaded
    assert cpu.get_torch_distributed_backend_str() == "gloo"
    with cpu.inference_mode():
        assert torch.is_inference_mode_enabled()


def test_seed_everything_is_reproducible(cpu):
    cpu.seed_everything(7)
    a = (random.random(), torch.rand(3))
    cpu.seed_everything(7)
    b = (random.random(), torch.rand(3))
    assert a[0] == b[0] and torch.equal(a[1], b[1])


def test_factories_return_real_classes(cpu):
    assert cpu.get_default_attention_backend() == "torch_native"
    assert cpu.get_mha_kv_pool_cls() is MHATokenToKVPool
    assert cpu.get_paged_allocator_cls() is PagedTokenToKVPoolAllocator
    assert cpu.get_graph_runner_cls() is EagerGraphRunner
    assert cpu.get_quantization_config(None) is None
    with pytest.raises(PlatformError, match="--quantization 'fp8'"):
        cpu.get_quantization_config("fp8")
    with pytest.raises(NotImplementedError, match="MLA"):
        cpu.get_mla_kv_pool_cls()


def test_kv_pool_and_allocator_work_together(cpu):
    pool = cpu.get_mha_kv_pool_cls()(size=32, page_size=8, dtype=torch.float32, head_num=2, head_dim=4, layer_num=2, device="cpu")
    alloc = cpu.get_paged_allocator_cls()(size=32, page_size=8)
    pages = alloc.alloc(2)
    assert pages is not None and alloc.available_pages() == 2
    assert alloc.alloc(3) is None and alloc.available_pages() == 2  # nothing taken on failure
    loc = torch.tensor([pages[0] * 8 + 1])
    pool.set_kv_buffer(1, loc, torch.ones(1, 2, 4), torch.full((1, 2, 4), 2.0))
    assert pool.get_key_buffer(1)[loc].sum() == 8 and pool.get_value_buffer(1)[loc].sum() == 16
    assert pool.nbytes() == 2 * 2 * 32 * 2 * 4 * 4
    alloc.free(pages)
    with pytest.raises(ValueError, match="double free"):
        alloc.free(pages[:1])


def test_eager_graph_runner_runs_the_step():
    runner = EagerGraphRunner(lambda x: x + 1, max_batch_size=8)
    assert runner.can_run(4) and runner.can_run(8) and not runner.can_run(9) and not runner.can_run(0) and runner.run(1) == 2
