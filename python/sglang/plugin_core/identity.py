"""Identity types and host queries both platform base classes share.

Each runtime keeps its own ``PlatformEnum`` (the spec gives SRT and diffusion
separate identity types, so a package serving both defines two classes, each
with its runtime's ``PlatformEnum.OOT``); both enums are built here by
:func:`platform_enum` from the member names a runtime lists.
"""

from __future__ import annotations

import enum
import platform as _pyplatform
import random
from typing import NamedTuple


class CpuArchEnum(enum.Enum):
    X86 = enum.auto()
    ARM = enum.auto()
    UNSPECIFIED = enum.auto()


class DeviceCapability(NamedTuple):
    """A device's compute capability; ordered like a tuple, ``(8, 0) < (9, 0)``."""

    major: int
    minor: int

    def as_version_str(self) -> str:
        return f"{self.major}.{self.minor}"

    def to_int(self) -> int:
        """``major * 10 + minor``, e.g. 90 for (9, 0)."""
        assert 0 <= self.minor < 10, "minor must be a single digit to encode as an int"
        return self.major * 10 + self.minor


def platform_enum(module: str, doc: str, members: tuple[str, ...]) -> type[enum.Enum]:
    """A runtime's ``PlatformEnum``: ``members`` then ``OOT`` and ``UNSPECIFIED``, defined in ``module``."""
    cls = enum.Enum("PlatformEnum", [*members, "OOT", "UNSPECIFIED"], module=module)  # type: ignore[misc]
    cls.__doc__ = doc
    return cls


def cpu_architecture() -> CpuArchEnum:
    """The host CPU's architecture family, from ``platform.machine()``."""
    machine = _pyplatform.machine().lower()
    if machine in ("x86_64", "amd64", "i386", "i686", "x86"):
        return CpuArchEnum.X86
    if machine.startswith(("arm", "aarch64")):
        return CpuArchEnum.ARM
    return CpuArchEnum.UNSPECIFIED


def seed_host_rngs(seed: int) -> None:
    """Seed Python's, NumPy's (when installed) and torch's generators."""
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % (1 << 32))
    except ImportError:
        pass
    import torch

    torch.manual_seed(seed)
