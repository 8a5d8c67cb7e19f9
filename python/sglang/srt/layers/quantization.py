"""Which weight format a runner uses: ``--quantization auto`` (also what unset means), ``none``, or a platform's method.

``auto`` keeps a GGUF's quantized blocks where the platform has kernels for them (the GGUF's own
format: Q4_0 / Q4_1 linear weights -> ``gguf_q4``) and dequantizes otherwise; ``none`` dequantizes
every weight to ``--dtype`` (with ``--dtype float32``, the reference-exact mode); any other value is
the platform's to accept or refuse (``get_quantization_config``). The platform sees ``None`` or a
method name, never ``auto`` / ``none``.
"""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path
from typing import Any

logger = logging.getLogger("sglang.srt.model_executor.model_runner")

AUTO, NONE = "auto", "none"
# a GGUF's dominant linear-weight type -> the method that keeps those blocks
GGUF_NATIVE = {"Q4_0": "gguf_q4", "Q4_1": "gguf_q4"}
KERNEL_DTYPES = {"gguf_q4": ("float32", "bfloat16")}  # the dtypes each method has kernels for


def gguf_weight_format(path: Path) -> str | None:
    """The most common tensor type among a GGUF's 2-D ``.weight`` tensors, e.g. ``"Q4_1"`` (metadata only)."""
    from sglang.srt.model_loader.gguf_loader import _open

    reader = _open(path)
    types = Counter(t.tensor_type.name for t in reader.tensors if t.name.endswith(".weight") and len(t.shape) == 2)
    return types.most_common(1)[0][0] if types else None


def resolve_quantization(requested: str | None, model_path: str, dtype: str, platform: Any) -> str | None:
    """The method this runner uses (``None``: dense weights in ``dtype``). Who calls: the model runner, once.

    ``requested`` None (the flag unset) means ``auto``: the fast format is the default, as llama.cpp
    serves a Q4 GGUF on Q4 kernels; ``none`` asks for dense weights."""
    if requested == NONE:
        return None
    if requested not in (None, AUTO):
        return requested
    from sglang.srt.model_loader.paths import resolve_model_path

    path = resolve_model_path(model_path)
    fmt = gguf_weight_format(path) if path.is_file() and path.suffix == ".gguf" else None
    method = GGUF_NATIVE.get(fmt or "")
    if method is None:
        return None
    if dtype not in KERNEL_DTYPES[method]:
        logger.info("--quantization auto: %s weights dequantized, %s has kernels for %s only", fmt, method, "/".join(KERNEL_DTYPES[method]))
        return None
    try:
        platform.verify_quantization(method)
        if platform.get_quantization_config(method) is None:
            return None
    except Exception as exc:  # the platform has no kernels for these blocks: dense weights, as --quantization none
        logger.info("--quantization auto: %s weights dequantized (%s)", fmt, exc)
        return None
    logger.info("--quantization auto: the GGUF's %s weights stay packed (%s; --quantization none dequantizes)", fmt, method)
    return method
