"""Contract tables: for each platform method, its status and who calls it.

``docs/plugin_contract.md`` is generated from these tables and the platform
classes themselves (signatures and defaults are read from the code), and a
test keeps the checked-in file, the tables and the classes in step:

    python -m sglang.cli.plugins.contract_doc > docs/plugin_contract.md
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from dataclasses import dataclass


@dataclass(frozen=True)
class ContractItem:
    """One public member of a platform interface.

    ``status``: Active (this project calls it through ``current_platform``),
    Planned (reserved; the spec's core does not call it yet), Compatibility (a
    kept adapter), Identity (identity attributes and predicates).
    ``called_by``: modules that call it here (checked by a test).
    """

    name: str
    area: str
    status: str
    called_by: tuple[str, ...] = ()
    spec_status: str = ""  # where the spec's table says otherwise, what it says


def method_default(cls: type, name: str) -> str:
    """A short description of the base implementation, read from its source."""
    attr = cls.__dict__[name]
    if not callable(attr) and not isinstance(attr, (staticmethod, classmethod, property)):
        return f"`{attr!r}`"
    fn = attr.__func__ if isinstance(attr, (staticmethod, classmethod)) else attr
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return "implemented"
    body = [n for n in tree.body[0].body if not (isinstance(n, ast.Expr) and isinstance(getattr(n, "value", None), ast.Constant))]  # type: ignore[attr-defined]
    if not body or all(isinstance(n, ast.Pass) for n in body):
        return "no-op"
    last = body[-1]
    if isinstance(last, ast.Raise) and "NotImplementedError" in ast.unparse(last):
        return "raises `NotImplementedError`"
    if len(body) == 1 and isinstance(last, ast.Return) and last.value is not None:
        text = ast.unparse(last.value)
        return f"`{text}`" if len(text) <= 60 else "implemented"
    return "implemented"


def _signature(cls: type, name: str) -> str:
    attr = cls.__dict__[name]
    if isinstance(attr, (staticmethod, classmethod)):
        attr = attr.__func__
    if not callable(attr):
        return name
    params = list(inspect.signature(attr).parameters.values())[1:]
    return f"{name}({', '.join(str(p).replace(chr(39), '') for p in params)})"


def public_members(classes: tuple[type, ...]) -> dict[str, type]:
    """Public members of the interface classes, mapped to the class that declares them."""
    out: dict[str, type] = {}
    for cls in classes:
        for name in cls.__dict__:
            if not name.startswith("_"):
                out.setdefault(name, cls)
    return out


def render(title: str, classes: tuple[type, ...], items: list[ContractItem], intro: str) -> str:
    members = public_members(classes)
    lines = [f"## {title}", "", intro, "", "| member | declared in | default | status | called by |", "|---|---|---|---|---|"]
    for it in items:
        cls = members[it.name]
        status = it.status + (f" (spec: {it.spec_status})" if it.spec_status else "")
        callers = ", ".join(f"`{c}`" for c in it.called_by) or "—"
        lines.append(f"| `{_signature(cls, it.name)}` | `{cls.__name__}` | {method_default(cls, it.name)} | {status} | {callers} |")
    return "\n".join(lines) + "\n"
