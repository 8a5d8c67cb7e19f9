"""The CPU kernel families a compiler test can run on this machine."""

from __future__ import annotations

from typing import Any

import pytest


def load_family_or_skip(name: str) -> Any:
    """The decode kernels of family ``name``, built for it; skips (naming the missing CPU flags) where this CPU lacks it."""
    from sglang.host import cpu_flags
    from sglang.srt.layers.cpu_kernels.build import load_decode_kernels
    from sglang.srt.layers.cpu_kernels.isa import FAMILIES

    missing = sorted(FAMILIES[name].features - cpu_flags())
    if missing:
        pytest.skip(f"kernel family {name}: this CPU lacks {', '.join(missing)}")
    return load_decode_kernels(name)
