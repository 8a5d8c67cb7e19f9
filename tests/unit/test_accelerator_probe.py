"""The accelerator probe behind ``--device auto`` and the platform fallback: a torch built for no accelerator is
recognised from its ``version.py`` without importing torch; any other build is asked (``torch.cuda.is_available``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sglang.srt.platforms.selection import accelerator_device, built_backends, torch_build_backends


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("cuda: Optional[str] = None\nhip: Optional[str] = None\nxpu: Optional[str] = None\n", frozenset()),
        ("__version__ = '2.13.0+cu128'\ncuda: Optional[str] = '12.8'\nhip: Optional[str] = None\nxpu = None\n", frozenset({"cuda"})),
        ("cuda = None\nhip = '6.4.1'\nrocm = '6.4.1'\nxpu = None\n", frozenset({"hip"})),
        ("cuda = None\nhip = None\nxpu = '20250101'\n", frozenset({"xpu"})),
        ("cuda = hip = xpu = ''\n", frozenset()),  # empty strings are no build
        ("cuda = None\nhip = None\nxpu = _probe()\n", frozenset({"xpu"})),  # not a constant: taken as a build, torch is asked
        ("cuda = None\nhip = None\n", None),  # an older torch without the xpu field: unknown, torch is asked
        ("def cuda(): pass\nhip = xpu = None\n", None),  # only assignments name a field
    ],
)
def test_the_build_backends_come_from_the_version_files_constants(tmp_path: Path, text: str, expected: frozenset[str] | None) -> None:
    f = tmp_path / "version.py"
    f.write_text("from typing import Optional\n" + text)
    assert built_backends(str(f)) == expected


def test_an_unreadable_or_broken_version_file_is_unknown_not_cpu_only(tmp_path: Path) -> None:
    assert built_backends(str(tmp_path / "missing.py")) is None
    broken = tmp_path / "version.py"
    broken.write_text("cuda = (\n")
    assert built_backends(str(broken)) is None  # unknown: the caller imports torch and asks it


def test_the_installed_torch_agrees_with_its_own_version_module() -> None:
    import torch

    assert torch_build_backends() == frozenset(k for k in ("cuda", "hip", "xpu") if getattr(torch.version, k, None))
    if not torch_build_backends():  # the CPU wheel this project pins: nothing to find, and torch agrees
        assert accelerator_device() is None
        assert not torch.cuda.is_available()
