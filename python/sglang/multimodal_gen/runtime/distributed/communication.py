"""The sequence-parallel group of a diffusion worker and ``all_to_all_4D``.

The communicator class comes from
``current_platform.get_all_to_all_communicator_cls()`` (whose default falls
back to the compatibility ``get_device_communicator_cls()``); it controls
``all_to_all_4D`` only, not every collective.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist


class TorchAllToAllCommunicator:
    """``all_to_all_4D`` through ``torch.distributed.all_to_all`` (works on gloo)."""

    def __init__(self, group: Any, world_size: int) -> None:
        self.group, self.world_size = group, world_size

    def all_to_all_4D(self, x: torch.Tensor, scatter_dim: int, gather_dim: int) -> torch.Tensor:
        if self.world_size == 1:
            return x
        chunks = [c.contiguous() for c in x.chunk(self.world_size, dim=scatter_dim)]
        out = [torch.empty_like(c) for c in chunks]
        dist.all_to_all(out, chunks, group=self.group)
        return torch.cat(out, dim=gather_dim)


class _Group:
    world_size = 1
    rank = 0
    communicator: Any = None


def init_sequence_parallel(world_size: int, rank: int, group: Any = None) -> Any:
    """Record the group and build its communicator; called by ``GPUWorker``."""
    from sglang.multimodal_gen.runtime.platforms import current_platform
    from sglang.plugin_core.discovery import import_qualname

    qualname = current_platform.get_all_to_all_communicator_cls()
    cls = import_qualname(qualname) if isinstance(qualname, str) else qualname
    _Group.world_size, _Group.rank = world_size, rank
    _Group.communicator = cls(group, world_size)
    return _Group.communicator


def sp_world_size() -> int:
    return _Group.world_size


def all_to_all_4D(x: torch.Tensor, scatter_dim: int, gather_dim: int) -> torch.Tensor:
    """Scatter ``x`` along ``scatter_dim`` across the group and gather along ``gather_dim``."""
    comm = _Group.communicator
    if comm is None or _Group.world_size == 1:
        return x
    return comm.all_to_all_4D(x, scatter_dim, gather_dim)


def sequence_shard(x: torch.Tensor, dim: int = 1) -> torch.Tensor:
    """This rank's slice of ``x`` along the token dimension."""
    if _Group.world_size == 1:
        return x
    return x.chunk(_Group.world_size, dim=dim)[_Group.rank].contiguous()


def sequence_gather(x: torch.Tensor, dim: int = 1) -> torch.Tensor:
    """Concatenate every rank's slice along the token dimension (inverse of :func:`sequence_shard`)."""
    if _Group.world_size == 1:
        return x
    parts = [torch.empty_like(x) for _ in range(_Group.world_size)]
    dist.all_gather(parts, x.contiguous(), group=_Group.communicator.group)
    return torch.cat(parts, dim=dim)
