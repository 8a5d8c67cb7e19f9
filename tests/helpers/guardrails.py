"""AST checkers behind the guardrail tests. Each returns violations as messages
that say what to do, so a failing guardrail explains itself."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "sglang"

# The resolution pipeline may write ServerArgs; nothing else in the package may.
PIPELINE_FILES = ("srt/server_args.py", "srt/arg_groups/")
EXCLUDED = ("multimodal_gen/",)


def iter_py(root: Path, exclude: tuple[str, ...] = ()) -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if any(rel == e or rel.startswith(e) for e in exclude):
            continue
        yield rel, ast.parse(path.read_text(), filename=str(path))


def _is_server_args(node: ast.AST) -> bool:
    return (isinstance(node, ast.Name) and node.id == "server_args") or (isinstance(node, ast.Attribute) and node.attr == "server_args")


def mutation_violations(root: Path = PACKAGE) -> list[str]:
    """Assignments to ``server_args.X`` and ``setattr(server_args, ...)`` outside the pipeline."""
    out = []
    for rel, tree in iter_py(root, PIPELINE_FILES + EXCLUDED):
        for node in ast.walk(tree):
            targets: list[ast.AST] = []
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Attribute) and _is_server_args(t.value):
                    out.append(f"{rel}:{node.lineno}: assigns server_args.{t.attr}; use get_context().override(source, {t.attr}=...) or server_args.derive(...)")
            if isinstance(node, ast.Call) and node.args and _is_server_args(node.args[0]):
                fn = node.func
                name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else ""
                if name in ("setattr", "__setattr__"):
                    out.append(f"{rel}:{node.lineno}: {name}(server_args, ...) mutates ServerArgs; use get_context().override or derive")
    return out


def legacy_accessor_calls(root: Path = PACKAGE) -> list[str]:
    """Call sites of the ``get_global_server_args`` shim (new code: get_server_args())."""
    out = []
    for rel, tree in iter_py(root):
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                fn = node.func
                name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else ""
                if name == "get_global_server_args":
                    out.append(f"{rel}:{node.lineno}: call get_server_args() (runtime_context) instead of the legacy get_global_server_args()")
    return out


def global_statements(root: Path = PACKAGE) -> dict[str, set[str]]:
    """``global`` statement names per file."""
    out: dict[str, set[str]] = {}
    for rel, tree in iter_py(root):
        for node in ast.walk(tree):
            if isinstance(node, ast.Global):
                out.setdefault(rel, set()).update(node.names)
    return out


def _bag_read_chains(tree: ast.Module) -> Iterator[tuple[int, str, list[str]]]:
    """``(line, ns, [attr, ...])`` for every ``get_<ns>().a.b`` read, longest chain only."""
    parents: dict[ast.AST, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or node.args or node.keywords:
            continue
        fn = node.func
        name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else ""
        if not name.startswith("get_"):
            continue
        attrs, cur = [], node
        while isinstance(parents.get(cur), ast.Attribute) and parents[cur].value is cur:  # type: ignore[attr-defined]
            cur = parents[cur]
            attrs.append(cur.attr)  # type: ignore[attr-defined]
        if attrs:
            yield node.lineno, name[4:], attrs


def bag_read_violations(root: Path = PACKAGE) -> list[str]:
    """Every ``get_<ns>()...leaf`` read must name a field whose ``NS`` is that path."""
    from sglang.srt.arg_groups.meta import NAMESPACES, field_ns, public_fields
    from sglang.srt.context.bags import ConfigBag
    from sglang.srt.context.parallel import ParallelContext
    from sglang.srt.server_args import ServerArgs

    ns_of = {f.name: field_ns(f).path for f in public_fields(ServerArgs)}
    sub_paths = {p.rsplit(".", i)[0] for p in ns_of.values() for i in range(p.count(".") + 1)}
    bag_methods = {n for n in dir(ConfigBag) if not n.startswith("_")}
    live = {n for n in dir(ParallelContext) if not n.startswith("_")}
    out = []
    for rel, tree in iter_py(root):
        for line, ns, attrs in _bag_read_chains(tree):
            if ns not in NAMESPACES:
                continue
            if ns == "parallel" and attrs[0] in live:
                continue
            path = ns
            for i, a in enumerate(attrs):
                if f"{path}.{a}" in sub_paths:
                    path = f"{path}.{a}"
                    continue
                if a in bag_methods:
                    break
                if ns_of.get(a) != path:
                    where = f"NS({ns_of[a]!r})" if a in ns_of else "no ServerArgs field"
                    out.append(f"{rel}:{line}: get_{ns}().{'.'.join(attrs[: i + 1])} reads {a!r} from bag '{path}', but it has {where}; read it from its own bag or add the field with NS({path!r})")
                break
            else:
                out.append(f"{rel}:{line}: get_{ns}().{'.'.join(attrs)} stops at a sub-bag; read a leaf")
    return out
