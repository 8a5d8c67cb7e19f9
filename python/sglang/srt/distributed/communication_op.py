"""Collectives over the tensor-parallel group (no-ops at tp_size 1)."""

from __future__ import annotations

import torch


def _group_size() -> tuple[object, int]:
    from sglang.srt.runtime_context import get_parallel

    p = get_parallel()
    if not p.is_initialized():
        return None, 1
    return p.tp_group, p.tp_size


def tensor_model_parallel_all_reduce(x: torch.Tensor) -> torch.Tensor:
    group, size = _group_size()
    if size == 1:
        return x
    import torch.distributed as dist

    dist.all_reduce(x, group=group)
    return x


def tensor_model_parallel_all_gather(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    group, size = _group_size()
    if size == 1:
        return x
    import torch.distributed as dist

    parts = [torch.empty_like(x) for _ in range(size)]
    dist.all_gather(parts, x.contiguous(), group=group)
    return torch.cat(parts, dim=dim)


def broadcast_from_first(x: torch.Tensor) -> torch.Tensor:
    """Make every TP rank hold rank 0's ``x`` (sampled tokens must agree)."""
    group, size = _group_size()
    if size == 1:
        return x
    import torch.distributed as dist

    dist.broadcast(x, src=dist.get_global_rank(group, 0) if group is not None else 0, group=group)
    return x
