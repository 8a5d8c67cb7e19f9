"""Launcher-stage late resolution of the ``lora`` namespace (upstream's ``check_lora_server_args``).

It cannot run inside ``ServerArgs.__post_init__``: it reads every adapter's ``adapter_config.json``.
The launcher calls :func:`check_lora_server_args` before publish; the resolved values are written in
place through ``declare_late_resolution``, so the HTTP server, the schedulers it spawns and every other
holder of the object see them:

- ``enable_lora=True`` when ``--lora-paths`` is given and ``--enable-lora`` is not;
- ``lora_paths=[LoRARef, ...]`` (``PATH``, ``NAME=PATH``, a JSON object, or from Python a dict
  ``{name: path}`` or dicts ``{"lora_name", "lora_path", "pinned"}``), ids ``uuid5(NAMESPACE_URL, "name\\0path")``;
- ``lora_target_modules={...}`` (``all`` expanded; default: the union of the adapters' modules);
- ``max_lora_rank`` (default: the largest adapter rank).

Readers use ``get_lora()`` after publish.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from sglang.srt.arg_groups.errors import ServerArgsError
from sglang.srt.lora.config import LoRAConfig, normalize_target_modules
from sglang.srt.lora.errors import LoRAError
from sglang.srt.lora.lora_registry import LoRARef

logger = logging.getLogger(__name__)
SOURCE = "check_lora_server_args"


def parse_lora_item(item: Any) -> LoRARef:
    """One ``--lora-paths`` item as a ref: ``PATH`` (its name is the path), ``NAME=PATH``, a JSON object
    string, or a dict ``{"lora_name", "lora_path", "pinned"}``."""
    if isinstance(item, LoRARef):
        return item
    if isinstance(item, str) and item.strip().startswith("{") and item.strip().endswith("}"):
        try:
            item = json.loads(item)
        except ValueError as exc:
            raise ServerArgsError(f"--lora-paths: {item!r} is not valid JSON ({exc})") from None
    if isinstance(item, dict):
        if not isinstance(item.get("lora_name"), str) or not isinstance(item.get("lora_path"), str):
            raise ServerArgsError(f"--lora-paths: {item!r} needs both 'lora_name' and 'lora_path' strings (and optionally 'pinned')")
        return LoRARef.make(item["lora_name"], item["lora_path"], bool(item.get("pinned", False)))
    if not isinstance(item, str) or not item:
        raise ServerArgsError(f"--lora-paths: {item!r} is not PATH, NAME=PATH or a JSON object")
    name, sep, path = item.partition("=")
    return LoRARef.make(name, path) if sep else LoRARef.make(item, item)


def parse_lora_paths(value: Any) -> list[LoRARef]:
    """Every form ``--lora-paths`` and the Python API take, as refs (names unique)."""
    if value is None:
        return []
    if isinstance(value, dict):
        items: list[Any] = [LoRARef.make(str(k), str(v)) for k, v in value.items()]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        items = [value]
    refs = [parse_lora_item(i) for i in items]
    names = [r.lora_name for r in refs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ServerArgsError(f"--lora-paths names {dup} more than once; give each adapter its own NAME=PATH")
    return refs


def check_lora_server_args(server_args: Any) -> None:
    """Validate and normalise the ``lora`` fields in place (before publish). Who calls: the launcher."""
    from sglang.srt.arg_groups.overrides import declare_late_resolution
    from sglang.srt.runtime_context import get_context

    if get_context().is_published(server_args):
        return  # resolved already (this object was launched before)
    sa = server_args
    refs = parse_lora_paths(sa.lora_paths)
    decl: dict[str, Any] = {"lora_paths": refs}
    enable = sa.enable_lora
    if refs and enable is None:
        logger.warning("--lora-paths is given: --enable-lora is set")
        enable = decl["enable_lora"] = True
    elif refs and enable is False:
        logger.warning("--enable-lora is false: --lora-paths %s is ignored", [r.lora_name for r in refs])
        decl["lora_paths"] = refs = []
    if not enable:
        declare_late_resolution(sa, SOURCE, **decl)
        return
    from sglang.srt.lora.backend import lora_backend_names

    if sa.lora_backend not in lora_backend_names():
        raise ServerArgsError(f"--lora-backend {sa.lora_backend!r} is not registered; registered: {', '.join(lora_backend_names())} "
                              "(register one with sglang.srt.lora.backend.register_lora_backend)")
    if sa.tp_size != 1:
        raise ServerArgsError(f"--enable-lora with --tp-size {sa.tp_size}: adapters are served on one rank per replica here; "
                              "use --dp-size for more replicas, or drop --enable-lora")
    if sa.max_loras_per_batch < 1:
        raise ServerArgsError(f"--max-loras-per-batch must be > 0, got {sa.max_loras_per_batch}")
    configs = []
    for r in refs:
        try:
            configs.append(LoRAConfig.from_dir(r.lora_path))
        except LoRAError as exc:
            raise ServerArgsError(f"--lora-paths {r.lora_name}={r.lora_path}: {exc}") from None
    if sa.lora_target_modules:
        try:
            targets = set(normalize_target_modules(sa.lora_target_modules, "--lora-target-modules"))
        except LoRAError as exc:
            raise ServerArgsError(str(exc)) from None
        for r, c in zip(refs, configs):
            if not c.target_modules <= targets:
                raise ServerArgsError(f"--lora-paths {r.lora_name} targets {sorted(c.target_modules - targets)}, which --lora-target-modules "
                                      f"{sorted(targets)} leaves out; add them (or pass --lora-target-modules all)")
    elif configs:
        targets = set().union(*(c.target_modules for c in configs))
    else:
        raise ServerArgsError("--enable-lora without --lora-paths needs --max-lora-rank and --lora-target-modules "
                              "(the pool's shape, which adapters loaded later must fit)")
    decl["lora_target_modules"] = targets
    top = max((c.r for c in configs), default=0)
    if sa.max_lora_rank is None:
        if not configs:
            raise ServerArgsError("--enable-lora without --lora-paths needs --max-lora-rank (the largest rank adapters loaded later may have)")
        decl["max_lora_rank"] = top
    elif sa.max_lora_rank < max(top, 1):
        raise ServerArgsError(f"--max-lora-rank {sa.max_lora_rank} is below the rank {top} of an adapter in --lora-paths; raise it")
    pinned = sum(r.pinned for r in refs)
    if pinned > sa.max_loras_per_batch - 1:
        raise ServerArgsError(f"{pinned} pinned adapters: at most --max-loras-per-batch - 1 = {sa.max_loras_per_batch - 1} may be pinned "
                              "(one slot stays free for the others); raise --max-loras-per-batch or pin fewer")
    if sa.max_loaded_loras is not None:
        if sa.max_loaded_loras < sa.max_loras_per_batch or sa.max_loaded_loras < len(refs):
            raise ServerArgsError(f"--max-loaded-loras {sa.max_loaded_loras} must be at least --max-loras-per-batch "
                                  f"({sa.max_loras_per_batch}) and the number of --lora-paths ({len(refs)})")
    declare_late_resolution(sa, SOURCE, **decl)
