"""KV pools: one base class per pluggable axis, a torch implementation for MHA.

Platforms hand the engine a pool class through ``get_mha_kv_pool_cls()``; the
engine sizes it from the memory config and owns nothing else about its layout.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


class KVCache(ABC):
    """Token-indexed KV storage for every layer. Slot ``i`` holds token ``i``."""

    def __init__(self, size: int, page_size: int, dtype: torch.dtype, head_num: int, head_dim: int, layer_num: int, device: str) -> None:
        if size <= 0 or page_size <= 0 or size % page_size:
            raise ValueError(f"KV pool size {size} must be a positive multiple of page_size {page_size}")
        self.size, self.page_size, self.dtype = size, page_size, dtype
        self.head_num, self.head_dim, self.layer_num, self.device = head_num, head_dim, layer_num, device

    @abstractmethod
    def get_key_buffer(self, layer_id: int) -> torch.Tensor: ...

    @abstractmethod
    def get_value_buffer(self, layer_id: int) -> torch.Tensor: ...

    @abstractmethod
    def set_kv_buffer(self, layer_id: int, loc: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None: ...

    @abstractmethod
    def nbytes(self) -> int: ...


class MHATokenToKVPool(KVCache):
    """Multi-head attention KV: per layer ``[size, head_num, head_dim]`` for K and V."""

    def __init__(self, size: int, page_size: int, dtype: torch.dtype, head_num: int, head_dim: int, layer_num: int, device: str) -> None:
        super().__init__(size, page_size, dtype, head_num, head_dim, layer_num, device)
        import torch

        shape = (size, head_num, head_dim)
        if str(device) == "cpu":  # decode attention reads scattered token rows: huge pages spare it a TLB miss each
            from sglang.utils.hugepages import huge_zeros

            self.k_buffer = [huge_zeros(shape, dtype) for _ in range(layer_num)]
            self.v_buffer = [huge_zeros(shape, dtype) for _ in range(layer_num)]
        else:
            self.k_buffer = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layer_num)]
            self.v_buffer = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layer_num)]

    def get_key_buffer(self, layer_id: int) -> torch.Tensor:
        return self.k_buffer[layer_id]

    def get_value_buffer(self, layer_id: int) -> torch.Tensor:
        return self.v_buffer[layer_id]

    def set_kv_buffer(self, layer_id: int, loc: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        # loc: [n] token slots; k, v: [n, head_num, head_dim]
        self.k_buffer[layer_id][loc] = k.to(self.dtype)
        self.v_buffer[layer_id][loc] = v.to(self.dtype)

    def nbytes(self) -> int:
        return sum(b.numel() * b.element_size() for b in self.k_buffer + self.v_buffer)
