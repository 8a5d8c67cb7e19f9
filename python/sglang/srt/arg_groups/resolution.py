"""The in-flight state of ``ServerArgs.__post_init__``: declarations and the view.

Handlers never write fields. They read the in-flight state through
``resolved_view(server_args)`` and return declarations ``{field: value}``;
declarations are validated against the whitelist (``Arg(resolvable=True)``)
when made, and materialized once at the end in gate order, last writer wins.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sglang.srt.arg_groups.errors import DeclarationError
from sglang.srt.arg_groups.meta import field_arg, public_fields

if TYPE_CHECKING:
    from sglang.srt.server_args import ServerArgs

GATES = ("device", "platform", "model_override", "derived", "post_process")


@dataclass(frozen=True)
class Declaration:
    gate: str
    source: str
    fields: Mapping[str, Any]


def suggest(name: str, names: list[str]) -> str:
    close = difflib.get_close_matches(name, names, n=3)
    return f" (did you mean {', '.join(close)}?)" if close else ""


def check_declarable(cls: type, source: str, fields: Mapping[str, Any]) -> None:
    """Raise :class:`DeclarationError` unless every field is on the whitelist."""
    by_name = {f.name: f for f in public_fields(cls)}
    for name in fields:
        f = by_name.get(name)
        if f is None:
            raise DeclarationError(f"{source} declares unknown server argument {name!r}{suggest(name, list(by_name))}")
        if not field_arg(f).resolvable:
            raise DeclarationError(
                f"{source} declares {name!r}, which is not declarable: only fields marked "
                "Arg(..., resolvable=True) in ServerArgs may be resolved by declarations"
            )


class Resolution:
    """Declarations made while one ``ServerArgs`` resolves."""

    def __init__(self, server_args: ServerArgs) -> None:
        self.server_args = server_args
        self.declarations: list[Declaration] = []
        self.gate = GATES[0]

    def declare(self, source: str, fields: Mapping[str, Any]) -> None:
        check_declarable(type(self.server_args), source, fields)
        self.declarations.append(Declaration(self.gate, source, dict(fields)))

    def overlay(self) -> dict[str, tuple[Any, str]]:
        """``{field: (value, source)}`` in gate order, last writer wins."""
        out: dict[str, tuple[Any, str]] = {}
        for d in sorted(self.declarations, key=lambda d: GATES.index(d.gate)):
            for k, v in d.fields.items():
                out[k] = (v, d.source)
        return out

    def view(self) -> ResolvedView:
        return ResolvedView(self.server_args, {k: v for k, (v, _) in self.overlay().items()})


class ResolvedView:
    """Read-only in-flight values: the fields overlaid with declarations so far."""

    __slots__ = ("_base", "_overlay")

    def __init__(self, base: Any, overlay: dict[str, Any]) -> None:
        object.__setattr__(self, "_base", base)
        object.__setattr__(self, "_overlay", overlay)

    def __getattr__(self, name: str) -> Any:
        overlay = object.__getattribute__(self, "_overlay")
        if name in overlay:
            return overlay[name]
        return getattr(object.__getattribute__(self, "_base"), name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"the resolved view is read-only; declare {name!r} instead (return it from your handler)")


def resolved_view(server_args: ServerArgs) -> ResolvedView:
    """The in-flight view of ``server_args``. Pipeline-internal: only for
    ``server_args.py``, ``arg_groups/`` and helpers the pipeline invokes."""
    res = server_args.__dict__.get("_resolution")
    if res is None:
        raise RuntimeError(
            "resolved_view() is only valid while ServerArgs.__post_init__ resolves; "
            "after resolution read the config bags (get_exec(), get_schedule(), ...)"
        )
    return res.view()
