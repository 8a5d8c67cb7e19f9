"""Ops registered with ``torch.library`` under the platform's dispatch key.

The kernel is registered for ``current_platform.get_torch_library_dispatch_key()``
(the platform's ``dispatch_key``), with a ``CompositeExplicitAutograd``
fallback so tensors of other backends still run.
"""

from __future__ import annotations

import math
import threading

import torch

_NAMESPACE = "sglang_diffusion"


class _Lib:
    lock = threading.Lock()
    lib: torch.library.Library | None = None
    dispatch_key: str | None = None


def _timestep_embedding_impl(t: torch.Tensor, dim: int, max_period: float) -> torch.Tensor:
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    args = t.float()[:, None] * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


def ensure_registered() -> str:
    """Define the library once per process; returns the dispatch key used."""
    if _Lib.lib is not None:
        assert _Lib.dispatch_key is not None
        return _Lib.dispatch_key
    with _Lib.lock:
        if _Lib.lib is None:
            from sglang.multimodal_gen.runtime.platforms import current_platform

            key = current_platform.get_torch_library_dispatch_key()
            lib = torch.library.Library(_NAMESPACE, "FRAGMENT")
            lib.define("timestep_embedding(Tensor t, int dim, float max_period) -> Tensor")
            lib.impl("timestep_embedding", _timestep_embedding_impl, key)
            if key != "CompositeExplicitAutograd":
                lib.impl("timestep_embedding", _timestep_embedding_impl, "CompositeExplicitAutograd")
            _Lib.lib, _Lib.dispatch_key = lib, key
    assert _Lib.dispatch_key is not None
    return _Lib.dispatch_key


def timestep_embedding(t: torch.Tensor, dim: int, max_period: float = 10000.0) -> torch.Tensor:
    """Sinusoidal embedding: t (B,) -> (B, dim) float32."""
    ensure_registered()
    return torch.ops.sglang_diffusion.timestep_embedding(t, dim, max_period)
