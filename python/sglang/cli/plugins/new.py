"""``sglang plugins new platform|plugin NAME``: scaffold a package that passes ``check`` as generated."""

from __future__ import annotations

import re
from pathlib import Path
from string import Template
from typing import Any

from sglang.cli.plugins.templates import PLATFORM, PLUGIN

NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
RESERVED = {"cpu", "cuda", "rocm", "xpu", "mps", "npu", "musa", "tpu"}


class ScaffoldError(ValueError):
    """The name or the output directory cannot be used; the message says why."""


def scaffold(kind: str, name: str, out: Path) -> tuple[Path, list[Path]]:
    """Write the package for ``kind`` (platform or plugin) named ``name`` under ``out``."""
    if not NAME_RE.match(name):
        raise ScaffoldError(f"NAME {name!r} must be lower-case letters, digits and underscores, starting with a letter (it becomes the entry-point name)")
    if kind == "platform" and name in RESERVED:
        raise ScaffoldError(f"NAME {name!r} is a built-in platform name; choose the device's own name")
    dist = f"{name.replace('_', '-')}-{kind}"
    pkg = f"{name}_{kind}"
    root = out / dist
    if root.exists():
        raise ScaffoldError(f"{root} already exists; remove it or pass --out elsewhere")
    values = {"name": name, "dist": dist, "pkg": pkg, "upper": name.upper(), "cls": "".join(p.capitalize() for p in name.split("_"))}
    written = []
    for rel, text in (PLATFORM if kind == "platform" else PLUGIN).items():
        path = root / Template(rel).substitute(values)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(Template(text).substitute(values))
        written.append(path)
    return root, written


def cmd_new(args: Any) -> int:
    root, written = scaffold(args.kind, args.name, Path(args.out))
    if args.json:
        import json

        print(json.dumps({"root": str(root), "files": [str(p) for p in written]}, indent=2))
    else:
        print(f"created {root}:")
        for p in written:
            print(f"  {p.relative_to(root)}")
        print(f"next: pip install -e {root} && sglang plugins check {root.name}")
    return 0
