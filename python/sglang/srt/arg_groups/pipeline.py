"""The ordered resolution handlers of ``ServerArgs.__post_init__``.

Each handler runs at its gate, reads the in-flight view, and declares. The
platform gate calls ``current_platform.apply_server_args_defaults``; a platform
declares through ``sglang.srt.arg_groups.overrides.declare``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sglang.srt.arg_groups.cli import CLI_GIVEN
from sglang.srt.arg_groups.meta import public_fields
from sglang.srt.arg_groups.overrides import model_override_declarations, register_post_process_pass, run_post_process_pass
from sglang.srt.arg_groups.resolution import Resolution


def probe_model_config(model_path: str) -> tuple[str | None, dict[str, Any]]:
    """``(architecture, config dict)`` read cheaply from a model directory's config.json."""
    cfg = Path(model_path) / "config.json"
    if not cfg.is_file():
        return None, {}
    data = json.loads(cfg.read_text())
    archs = data.get("architectures") or [None]
    return archs[0], data


def select_cpu_engine_early(device: str) -> None:
    """Set ``SGLANG_USE_CPU_ENGINE=1`` for ``--device cpu``, or ``auto`` with no accelerator.

    Must run before the platform resolves (entry points call it before
    ``load_plugins()``); a no-op once it has resolved or with ``SGLANG_PLATFORM``.
    """
    from sglang.srt.platforms import is_platform_resolved
    from sglang.srt.platforms.selection import CPU_ENGINE_ENV, CPU_ENGINE_RULE_ENV, PLATFORM_ENV, accelerator_device

    if is_platform_resolved() or os.environ.get(PLATFORM_ENV, "").strip() or os.environ.get(CPU_ENGINE_ENV, "").strip():
        return  # a user's SGLANG_USE_CPU_ENGINE stands, and so does the rule that names it
    if device == "cpu" or (device == "auto" and accelerator_device() is None):
        os.environ[CPU_ENGINE_ENV] = "1"
        # the decision's rule says why, truthfully (children inherit it with the variable)
        os.environ[CPU_ENGINE_RULE_ENV] = ("--device cpu: the CPU engine" if device == "cpu"
                                           else "no accelerator found: the CPU engine, the --device auto default")


def _handle_device(sa: Any, res: Resolution) -> None:
    """``--device auto``: the platform's device; the CPU engine when no accelerator is found.

    ``SGLANG_USE_CPU_ENGINE=1`` only matters when no platform plugin is active,
    so setting it before the platform resolves keeps the selection chain exact.
    """
    device = res.view().device
    select_cpu_engine_early(device)
    if device == "auto":
        from sglang.srt.platforms import current_platform

        resolved = current_platform.device_type if current_platform.device_type != "unknown" else "cpu"
        res.declare("device auto-detection", {"device": resolved})


def _handle_platform(sa: Any, res: Resolution) -> None:
    """The platform's defaults: the mapping ``apply_server_args_defaults`` returns is declared under the
    platform's name (a platform may also call ``declare`` itself; both are whitelist-checked)."""
    from sglang.srt.platforms import current_platform

    defaults = current_platform.apply_server_args_defaults(sa)
    if defaults:
        res.declare(f"platform default ({type(current_platform).__name__})", dict(defaults))


def _handle_model_override(sa: Any, res: Resolution) -> None:
    arch, hf_config = probe_model_config(sa.model_path)
    decl = model_override_declarations(sa, arch, hf_config)
    if decl:
        res.declare(f"model override ({arch})", decl)


def _handle_derived(sa: Any, res: Resolution) -> None:
    view = res.view()
    on_cpu = view.device == "cpu"
    decl: dict[str, Any] = {}
    if view.chunked_prefill_size is None:
        decl["chunked_prefill_size"] = 512 if on_cpu else 4096
    if view.mem_fraction_static is None:
        # CPU: the KV cache shares host memory with everything else; 2% of what is free
        decl["mem_fraction_static"] = 0.02 if on_cpu else 0.85
    if decl:
        res.declare("derived default", decl)
    from sglang.srt.arg_groups.speculative import speculative_declarations

    spec = speculative_declarations(view)
    if spec:
        res.declare("speculative decoding (as upstream resolves it)", spec)


@register_post_process_pass("schedule_policy")
def _normalize_schedule_policy(view: Any) -> dict[str, Any] | None:
    """``lpm`` ranks by prefix-cache hits; with the radix cache off it degrades to ``fcfs``."""
    if view.schedule_policy == "lpm" and view.disable_radix_cache:
        return {"schedule_policy": "fcfs"}
    return None


@register_post_process_pass("disaggregation_decode")
def _decode_without_prefix_cache(view: Any) -> dict[str, Any] | None:
    """A decode server takes every prompt page from its prefill server: it keeps no prefix cache unless
    ``--disaggregation-decode-enable-radix-cache`` asks for one (as upstream)."""
    if view.disaggregation_mode == "decode" and not view.disable_radix_cache and not view.disaggregation_decode_enable_radix_cache:
        return {"disable_radix_cache": True}
    return None


def _handle_post_process(sa: Any, res: Resolution) -> None:
    run_post_process_pass(sa, "disaggregation_decode")
    run_post_process_pass(sa, "schedule_policy")


PIPELINE: list[tuple[str, Callable[[Any, Resolution], None]]] = [
    ("device", _handle_device),
    ("platform", _handle_platform),
    ("model_override", _handle_model_override),
    ("derived", _handle_derived),
    ("post_process", _handle_post_process),
]


def run_pipeline(sa: Any) -> dict[str, str]:
    """Resolve ``sa`` in place; returns the provenance of every field."""
    res = Resolution(sa)
    object.__setattr__(sa, "_resolution", res)
    try:
        for gate, handler in PIPELINE:
            res.gate = gate
            handler(sa, res)
        overlay = res.overlay()
    finally:
        del sa.__dict__["_resolution"]
    given = CLI_GIVEN.get()
    prov: dict[str, str] = {}
    for f in public_fields(type(sa)):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        if f.name in given:
            prov[f.name] = "cli"
        elif getattr(sa, f.name) != default:
            prov[f.name] = "constructor"
        else:
            prov[f.name] = "default"
    for name, (value, source) in overlay.items():
        object.__setattr__(sa, name, value)
        prov[name] = source
    return prov
