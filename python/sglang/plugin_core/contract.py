"""Interface contract checks run when a platform subclass is *defined*.

A vendor class may only add public methods the interface declares (helpers
start with ``_``), and every override must accept the base method's
parameters. Checking at class definition (pluggy's habit) turns a typo like
``get_default_attn_backend`` into an error at import, not a silent no-op.
"""

from __future__ import annotations

import inspect
from typing import Any

_INTERFACE_FLAG = "_sglang_interface"


def _unwrap(attr: Any) -> Any:
    if isinstance(attr, (staticmethod, classmethod)):
        return attr.__func__
    if isinstance(attr, property):
        return attr.fget
    return attr


def _declared(cls: type) -> dict[str, Any]:
    """Public attributes of every interface class in ``cls``'s MRO."""
    out: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        if klass.__dict__.get(_INTERFACE_FLAG, False):
            out.update({k: v for k, v in klass.__dict__.items() if not k.startswith("_")})
    return out


def signature_problem(base: Any, override: Any) -> str | None:
    """Why ``override`` cannot be called like ``base`` (``None`` if it can)."""
    try:
        b = inspect.signature(_unwrap(base))
        o = inspect.signature(_unwrap(override))
    except (TypeError, ValueError):
        return None
    bp = list(b.parameters.values())
    op = list(o.parameters.values())
    skip = 0 if isinstance(base, staticmethod) else 1  # self / cls
    bp, op = bp[skip:], op[skip:] if not isinstance(override, staticmethod) else op
    var_pos = any(p.kind is p.VAR_POSITIONAL for p in op)
    var_kw = any(p.kind is p.VAR_KEYWORD for p in op)
    o_pos = [p for p in op if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    o_kw = {p.name: p for p in op if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    b_pos = [p for p in bp if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    for i, p in enumerate(b_pos):
        if i < len(o_pos):
            q = o_pos[i]
            if p.kind is p.POSITIONAL_OR_KEYWORD and q.name != p.name and not var_kw:
                return f"parameter {i + 1} is named {q.name!r}, the interface calls it {p.name!r}"
            if p.default is not p.empty and q.default is p.empty:
                return f"parameter {q.name!r} needs a default, as the interface's {p.name!r} has one"
        elif not var_pos:
            return f"it does not accept the interface's parameter {p.name!r}"
    for p in bp:
        if p.kind is p.KEYWORD_ONLY and p.name not in o_kw and not var_kw:
            return f"it does not accept the keyword parameter {p.name!r}"
    for q in o_pos[len(b_pos):]:
        if q.default is q.empty:
            return f"it requires the extra parameter {q.name!r}, which callers never pass"
    for q in op:
        if q.kind is q.KEYWORD_ONLY and q.default is q.empty and q.name not in {p.name for p in bp}:
            return f"it requires the extra keyword parameter {q.name!r}, which callers never pass"
    return None


def check_subclass(cls: type, interface_name: str) -> None:
    """Raise ``TypeError`` when ``cls`` breaks the interface contract."""
    if cls.__dict__.get(_INTERFACE_FLAG, False):
        return
    declared = _declared(cls)
    for name, attr in cls.__dict__.items():
        if name.startswith("_"):
            continue
        is_method = inspect.isfunction(attr) or isinstance(attr, (staticmethod, classmethod, property))
        if name not in declared:
            if is_method:
                raise TypeError(
                    f"{cls.__module__}.{cls.__qualname__}.{name} is not part of the {interface_name} "
                    f"interface: rename it to '_{name}' if it is a vendor helper, or check the spelling "
                    "against the interface reference (docs/plugin_contract.md)"
                )
            continue
        base = declared[name]
        if is_method and callable(_unwrap(base)):
            problem = signature_problem(base, attr)
            if problem:
                raise TypeError(
                    f"{cls.__module__}.{cls.__qualname__}.{name} overrides {interface_name}.{name} "
                    f"incompatibly: {problem}; match the interface signature {name}{inspect.signature(_unwrap(base))}"
                )
