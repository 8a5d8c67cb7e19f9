"""Process group and model-parallel groups.

Only this module installs live topology into ``get_parallel()``; everything
else reads it from there.
"""

from __future__ import annotations

import datetime
import logging

from sglang.utils.dist_store import bound_store

logger = logging.getLogger(__name__)


def init_distributed_environment(backend: str, world_size: int, rank: int, init_method: str, timeout_s: float = 600.0) -> None:
    """Join the default process group (idempotent within a process); every socket binds the init host."""
    import torch.distributed as dist

    if dist.is_initialized():
        if dist.get_world_size() != world_size or dist.get_rank() != rank:
            raise RuntimeError(
                f"torch.distributed is already initialized as rank {dist.get_rank()}/{dist.get_world_size()}, "
                f"not {rank}/{world_size}"
            )
        return
    timeout = datetime.timedelta(seconds=timeout_s)
    if init_method.startswith("tcp://"):
        store = bound_store(init_method, world_size, rank, timeout)
        dist.init_process_group(backend, store=store, world_size=world_size, rank=rank, timeout=timeout)
    else:
        dist.init_process_group(backend, init_method=init_method, world_size=world_size, rank=rank, timeout=timeout)
    logger.info("joined process group: backend=%s rank=%d world_size=%d", backend, rank, world_size)


def initialize_model_parallel(tp_size: int) -> None:
    """Create the tensor-parallel groups (consecutive ranks) and publish them."""
    import torch.distributed as dist

    from sglang.srt.runtime_context import get_context

    world = dist.get_world_size()
    if world % tp_size:
        raise RuntimeError(f"world size {world} is not a multiple of --tp-size {tp_size}")
    rank = dist.get_rank()
    mine = None
    for start in range(0, world, tp_size):
        ranks = list(range(start, start + tp_size))
        group = dist.group.WORLD if tp_size == world else dist.new_group(ranks)
        if rank in ranks:
            mine = group
    get_context().parallel.install_live(tp_group=mine)


def destroy_model_parallel() -> None:
    """Forget the groups and leave the process group."""
    import torch.distributed as dist

    from sglang.srt.runtime_context import get_context

    get_context().parallel.clear_live()
    if dist.is_initialized():
        dist.destroy_process_group()
