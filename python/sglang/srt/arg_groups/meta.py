"""Field metadata of ``ServerArgs``: ``Arg`` (CLI and whitelist) and ``NS`` (bag path)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

ARG_KEY = "sglang_arg"
NS_KEY = "sglang_ns"

NAMESPACES = ("exec", "memory", "schedule", "model", "spec", "serving", "observability", "disagg", "lora", "mm", "device", "parallel")


@dataclass(frozen=True)
class Arg:
    """CLI and resolution metadata of one field.

    ``resolvable=True`` puts the field on the declarable whitelist: model
    overrides, platform defaults, post-process passes, late resolution and
    load-time overrides may set it; nothing may set any other field.
    """

    help: str
    choices: Sequence[Any] | None = None
    cli: str | None = None  # the flag; default: --field-name
    aliases: tuple[str, ...] = ()  # more spellings of the flag (upstream's older or shorter names)
    resolvable: bool = False
    metavar: str | None = None
    secret: bool = False  # never shown: dumps, logs and /get_server_info print "***"
    json_object: bool = False  # a JSON object: text on the command line; text or a dict from a constructor
    nargs: str | None = None  # a list field's argparse nargs ("*": zero or more values)


@dataclass(frozen=True)
class NS:
    """The config-bag path of a field, e.g. ``NS("exec.attention")``."""

    path: str

    def __post_init__(self) -> None:
        parts = self.path.split(".")
        if parts[0] not in NAMESPACES or not all(p.isidentifier() for p in parts):
            raise ValueError(f"NS({self.path!r}): the first part must be one of {', '.join(NAMESPACES)}")

    @property
    def top(self) -> str:
        return self.path.split(".", 1)[0]


def arg(default: Any, a: Arg, ns: NS, *, factory: Any = None) -> Any:
    """A dataclass field carrying ``Arg`` and ``NS`` metadata."""
    meta = {ARG_KEY: a, NS_KEY: ns}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta, repr=not a.secret)
    return dataclasses.field(default=default, metadata=meta, repr=not a.secret)  # a secret stays out of repr()


def field_arg(f: dataclasses.Field) -> Arg:
    return f.metadata[ARG_KEY]


def field_ns(f: dataclasses.Field) -> NS:
    return f.metadata[NS_KEY]


def public_fields(cls: type) -> list[dataclasses.Field]:
    """The ``ServerArgs`` fields that carry metadata (all of them, by the lint)."""
    return [f for f in dataclasses.fields(cls) if not f.name.startswith("_")]


REDACTED = "***"


def shown_value(f: dataclasses.Field, value: Any) -> Any:
    """``value`` as it may appear in a log, a dump or a response (a secret that is set is ``***``)."""
    return REDACTED if field_arg(f).secret and value is not None else value
