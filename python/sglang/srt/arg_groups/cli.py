"""The ``ServerArgs`` command line, generated from field metadata."""

from __future__ import annotations

import argparse
import contextvars
import dataclasses
import typing
from typing import Any

from sglang.srt.arg_groups.meta import field_arg, field_ns, public_fields

# The fields the user gave on the command line, for provenance ("cli").
CLI_GIVEN: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar("sglang_cli_given", default=frozenset())


def flag_of(f: dataclasses.Field) -> str:
    return field_arg(f).cli or "--" + f.name.replace("_", "-")


def base_type(tp: Any) -> tuple[type, bool]:
    """``(scalar type, optional)`` of an annotation such as ``int | None``."""
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if args and len(args) < len(typing.get_args(tp)):
        return args[0], True
    return tp, False


def add_cli_args(cls: type, parser: argparse.ArgumentParser) -> None:
    """One flag per field; help, choices and flag names come from ``Arg``."""
    hints = typing.get_type_hints(cls)
    groups: dict[str, argparse._ArgumentGroup] = {}
    for f in public_fields(cls):
        a, ns = field_arg(f), field_ns(f)
        group = groups.get(ns.top) or groups.setdefault(ns.top, parser.add_argument_group(f"{ns.top} options"))
        tp, optional = base_type(hints[f.name])
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        help_text = f"{a.help} (default: {default})"
        if tp is bool:
            group.add_argument(flag_of(f), *a.aliases, dest=f.name, action="store_true", default=default, help=a.help)
            continue
        if a.nargs is not None:  # a list of strings (e.g. --lora-paths A B)
            group.add_argument(flag_of(f), *a.aliases, dest=f.name, type=str, nargs=a.nargs, default=default, metavar=a.metavar, help=help_text)
            continue
        group.add_argument(flag_of(f), *a.aliases, dest=f.name, type=tp, default=default, choices=a.choices, metavar=a.metavar, help=help_text)


def given_flags(cls: type, parser: argparse.ArgumentParser, argv: list[str]) -> frozenset[str]:
    """Which fields ``argv`` sets explicitly (parsed again with every default suppressed)."""
    probe = argparse.ArgumentParser(add_help=False, argument_default=argparse.SUPPRESS)
    for action in parser._actions:
        if action.dest in {f.name for f in public_fields(cls)}:
            kwargs: dict[str, Any] = {"dest": action.dest}
            if isinstance(action, argparse._StoreTrueAction):
                kwargs["action"] = "store_true"
            else:
                kwargs["type"] = action.type
                if action.nargs is not None:
                    kwargs["nargs"] = action.nargs
            probe.add_argument(*action.option_strings, **kwargs)
    known, _ = probe.parse_known_args(argv)
    return frozenset(vars(known))


def from_cli_args(cls: type, args: argparse.Namespace, given: frozenset[str] = frozenset()) -> Any:
    token = CLI_GIVEN.set(given)
    try:
        return cls(**{f.name: getattr(args, f.name) for f in public_fields(cls) if hasattr(args, f.name)})
    finally:
        CLI_GIVEN.reset(token)
