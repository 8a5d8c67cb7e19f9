"""CPU kernels compiled on first use: the fused decode step (``csrc/decode_step.cpp``).

``load_decode_kernels()`` builds (once per machine, cached) and imports the
extension; it raises ``KernelBuildError`` naming the compiler and the fix when
it cannot. Importing this package does not import torch.
"""

from __future__ import annotations

from sglang.srt.layers.cpu_kernels.build import KernelBuildError, cache_dir, load_decode_kernels

__all__ = ["KernelBuildError", "cache_dir", "load_decode_kernels"]
