"""Interface contract checks run when a *platform* class is defined.

The root interface class of a runtime (``SRTPlatform``, the diffusion
``Platform``) calls :func:`check_subclass` from ``__init_subclass__``. A
partial interface (``DeviceMixin``) does not: a vendor mixin is checked as part
of the platform class that mixes it in, in either base order, because only
there is its public surface the platform's.

Rules, over every class in the platform's MRO that is not an interface class:

* every public name (method or value) must be declared by the interface;
  vendor helpers start with ``_``. A typo like ``get_default_attn_backend``
  becomes an error at import, not a silent no-op;
* an override of a declared method must be callable the way the engine calls
  it. The engine passes an interface method's positional parameters
  positionally (a unit test scans the engine for keyword uses), so a renamed
  positional parameter is fine; a dropped parameter, a dropped default, or a
  new required parameter is not. Keyword-only parameters keep their names;
* a declared method stays callable (a value in its place is an error).

All problems are reported in one error, so a port is fixed in one pass.
"""

from __future__ import annotations

import inspect
from typing import Any

_INTERFACE_FLAG = "_sglang_interface"
_METHOD_KINDS = (staticmethod, classmethod)


def _unwrap(attr: Any) -> Any:
    if isinstance(attr, _METHOD_KINDS):
        return attr.__func__
    if isinstance(attr, property):
        return attr.fget
    return attr


def _is_interface(klass: type) -> bool:
    return bool(klass.__dict__.get(_INTERFACE_FLAG, False))


def _declared(cls: type) -> dict[str, Any]:
    """Public attributes of every interface class in ``cls``'s MRO."""
    out: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        if _is_interface(klass):
            out.update({k: v for k, v in klass.__dict__.items() if not k.startswith("_")})
    return out


def signature_problem(base: Any, override: Any) -> str | None:
    """Why ``override`` cannot be called the way the engine calls ``base`` (``None`` if it can).

    The engine passes ``base``'s positional parameters by position, so only
    their count and defaults matter, not their names.
    """
    try:
        b = inspect.signature(_unwrap(base))
        o = inspect.signature(_unwrap(override))
    except (TypeError, ValueError):
        return None
    bp = list(b.parameters.values())[0 if isinstance(base, staticmethod) else 1:]  # drop self / cls
    op = list(o.parameters.values())[0 if isinstance(override, staticmethod) else 1:]
    var_pos = any(p.kind is p.VAR_POSITIONAL for p in op)
    var_kw = any(p.kind is p.VAR_KEYWORD for p in op)
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    o_pos = [p for p in op if p.kind in positional]
    o_kw = {p.name for p in op if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    b_pos = [p for p in bp if p.kind in positional]
    b_kw = {p.name for p in bp if p.kind is p.KEYWORD_ONLY}
    for i, p in enumerate(b_pos):
        if i >= len(o_pos):
            if not var_pos:
                return f"it does not accept the interface's parameter {p.name!r} (position {i + 1})"
        elif p.default is not p.empty and o_pos[i].default is p.empty:
            return f"parameter {o_pos[i].name!r} needs a default, as the interface's {p.name!r} has one (callers may omit it)"
    for name in sorted(b_kw - o_kw):
        if not var_kw:
            return f"it does not accept the keyword parameter {name!r}"
    for q in o_pos[len(b_pos):]:
        if q.default is q.empty:
            return f"it requires the extra parameter {q.name!r}, which callers never pass"
    for q in op:
        if q.kind is q.KEYWORD_ONLY and q.default is q.empty and q.name not in b_kw:
            return f"it requires the extra keyword parameter {q.name!r}, which callers never pass"
    return None


def _member_problem(name: str, base: Any, attr: Any, interface_name: str) -> str | None:
    if not callable(_unwrap(base)):
        return None  # a declared value (device_name, capabilities); its type is a conformance-kit check
    if isinstance(attr, property) or not (callable(attr) or isinstance(attr, _METHOD_KINDS)):
        return f"is a {type(attr).__name__} where the {interface_name} interface declares a method; define a method"
    problem = signature_problem(base, attr)
    if problem:
        return (f"overrides {interface_name}.{name} incompatibly: {problem}; "
                f"match the interface signature {name}{inspect.signature(_unwrap(base))}")
    return None


def contract_problems(cls: type, interface_name: str) -> list[str]:
    """Every way ``cls`` breaks the interface, one line each (empty when it conforms)."""
    declared = _declared(cls)
    undeclared: set[str] = set()
    out: list[str] = []
    for klass in cls.__mro__:
        if _is_interface(klass) or klass is object:
            continue
        origin = "" if klass is cls else f" (from {klass.__module__}.{klass.__qualname__})"
        for name, attr in klass.__dict__.items():
            if name.startswith("_"):
                continue
            if name not in declared:
                if name not in undeclared:  # the MRO's first definition speaks for the name
                    undeclared.add(name)
                    out.append(f"{name}{origin} is not part of the {interface_name} interface: rename it to "
                               f"'_{name}' if it is a vendor helper, or check the spelling against the interface reference")
                continue
            problem = _member_problem(name, declared[name], attr, interface_name)
            if problem:
                out.append(f"{name}{origin} {problem}")
    return out


def check_subclass(cls: type, interface_name: str, error: type[Exception] = TypeError) -> None:
    """Raise ``error`` (a ``TypeError`` subclass) naming every problem when ``cls`` breaks the contract.

    Called by a runtime's root interface class from ``__init_subclass__``; an
    interface class itself is never checked.
    """
    if _is_interface(cls):
        return
    problems = contract_problems(cls, interface_name)
    if problems:
        noun = "problem" if len(problems) == 1 else "problems"
        raise error(
            f"{cls.__module__}.{cls.__qualname__} does not match the {interface_name} interface "
            f"({len(problems)} {noun}; reference: docs/plugin_contract.md):\n"
            + "\n".join(f"  - {p}" for p in problems)
        )
