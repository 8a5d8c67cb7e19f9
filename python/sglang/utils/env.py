"""Numbers and switches read from ``SGLANG_*`` environment variables, parsed in one place so a bad value names its
variable.

Stdlib only: modules read these at import time (``import sglang`` stays light)."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import TypeVar

N = TypeVar("N", int, float)


class EnvValueError(ValueError):
    """An environment variable holds something other than the number it must be; the message names it and the fix."""


def env_number(name: str, default: N, cast: Callable[[str], N], minimum: N | None = None) -> N:
    """``cast(os.environ[name])``, or ``default`` when the variable is unset or empty; at least ``minimum`` if given.

    Raises :class:`EnvValueError` naming the variable, the value and what it must be."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    kind = "an integer" if cast is int else "a number"
    try:
        value = cast(raw)
    except ValueError:
        raise EnvValueError(f"{name}={raw!r} must be {kind} (unset it for the default, {default})") from None
    if isinstance(value, float) and math.isnan(value):
        raise EnvValueError(f"{name}={raw!r} must be {kind}, not NaN (unset it for the default, {default})")
    if minimum is not None and value < minimum:
        raise EnvValueError(f"{name}={raw!r} must be {kind} >= {minimum} (unset it for the default, {default})")
    return value


TRUE, FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def env_flag(name: str, default: bool = False) -> bool:
    """A switch: ``1``/``true``/``yes``/``on`` or ``0``/``false``/``no``/``off`` (any case); ``default`` when unset or
    empty. Raises :class:`EnvValueError` naming the variable for anything else (a typo must not read as off)."""
    raw = os.environ.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in TRUE or raw in FALSE:
        return raw in TRUE
    raise EnvValueError(f"{name}={raw!r} must be one of {', '.join(TRUE + FALSE)} (unset it for the default, {int(default)})")
