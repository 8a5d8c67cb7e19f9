"""The package layering of docs/architecture.md, checked on the source with ``ast`` (function-local imports included)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "python"
RUNTIMES = ("sglang.srt", "sglang.multimodal_gen")

# The one loop left is the one the spec's API implies, and each of its three edges is a documented call:
# configuration -> platforms (``ServerArgs()`` runs ``bootstrap()``, which loads plugins and selects the
# platform, and resolution asks ``current_platform`` for its defaults, as upstream's ServerArgs does);
# platforms -> execution (a platform is the factory of its graph runner, KV pool and quantization config, imported
# inside those methods); execution -> configuration (the model runner and layers read ``get_context()``). What the
# one-spine issue named, platforms calling back into the resolution modules, is gone and is checked below; a new
# cycle, or this one growing, fails.
KNOWN_CYCLES: list[frozenset[str]] = [frozenset({
    "sglang.srt.arg_groups", "sglang.srt.bootstrap", "sglang.srt.context", "sglang.srt.distributed", "sglang.srt.layers", "sglang.srt.model_executor",
    "sglang.srt.model_loader", "sglang.srt.models", "sglang.srt.platforms", "sglang.srt.plugins", "sglang.srt.runtime_context",
    "sglang.srt.server_args",
}), frozenset({
    # ``sglang.Engine(use_ray=True)`` is a ``sglang.srt.ray.RayEngine`` (``Engine.__new__`` picks the subclass, so
    # code written for ``Engine`` gets Ray by a flag), and ``RayEngine`` subclasses ``Engine``: two edges, both by design.
    "sglang.srt.entrypoints", "sglang.srt.ray",
})]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_only(node: ast.AST) -> bool:
    """``if TYPE_CHECKING:``: imports for annotations only, never executed, so no runtime edge."""
    return isinstance(node, ast.If) and (
        (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
        or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING"))


def _import_nodes(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    found: list[ast.Import | ast.ImportFrom] = []
    todo = [tree]
    while todo:
        node = todo.pop()
        if _type_only(node):
            todo.extend(getattr(node, "orelse", []))
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        todo.extend(ast.iter_child_nodes(node))
    return found


def _imports() -> dict[str, set[str]]:
    """module -> the sglang modules it imports anywhere in its source (function bodies included; ``if
    TYPE_CHECKING:`` blocks excluded)."""
    found: dict[str, set[str]] = {}
    for path in ROOT.joinpath("sglang").rglob("*.py"):
        mod = _module_name(path)
        is_pkg = path.name == "__init__.py"
        out: set[str] = set()
        for node in _import_nodes(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                out.update(a.name for a in node.names if a.name.startswith("sglang"))
            else:
                if node.level:
                    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    target = ".".join([*base, node.module] if node.module else base)
                else:
                    target = node.module or ""
                if target.startswith("sglang"):
                    out.add(target)
        found[mod] = out
    return found


def _within(mod: str, prefix: str) -> bool:
    return mod == prefix or mod.startswith(prefix + ".")


def _violations(src_prefix: str, forbidden: tuple[str, ...]) -> list[str]:
    return sorted(f"{m} imports {t}" for m, targets in _imports().items() if _within(m, src_prefix)
                  for t in targets if any(_within(t, f) for f in forbidden))


def test_plugin_core_imports_no_runtime_and_no_cli():
    assert _violations("sglang.plugin_core", (*RUNTIMES, "sglang.cli", "sglang.testing")) == []


def test_a_runtime_never_imports_the_other():
    assert _violations("sglang.srt", ("sglang.multimodal_gen",)) == []
    assert _violations("sglang.multimodal_gen", ("sglang.srt",)) == []


def test_shared_helpers_import_no_runtime():
    for shared in ("sglang.utils", "sglang.host"):
        assert _violations(shared, (*RUNTIMES, "sglang.cli")) == []


def _package(mod: str) -> str:
    """The unit of the cycle check: ``sglang.X.Y`` (a subpackage or a module of a top-level package)."""
    return ".".join(mod.split(".")[:3])


def _cycles() -> list[frozenset[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for mod, targets in _imports().items():
        for t in targets:
            a, b = _package(mod), _package(t)
            if a != b and b.count(".") >= 1:
                graph[a].add(b)
    # Tarjan's strongly connected components
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(frozenset(comp))

    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def test_no_new_import_cycle_between_packages():
    for cycle in _cycles():
        assert any(cycle <= known for known in KNOWN_CYCLES), f"a new import cycle between packages: {sorted(cycle)}"


CONFIG = ("sglang.srt.server_args", "sglang.srt.arg_groups", "sglang.srt.runtime_context", "sglang.srt.context")


def test_platforms_and_plugins_never_call_back_into_configuration():
    # platforms return their defaults as a mapping; resolution applies them (``ServerArgs`` only as a type)
    for layer in ("sglang.srt.platforms", "sglang.srt.plugins"):
        assert _violations(layer, CONFIG) == []


def test_type_only_imports_are_no_edge_but_executed_ones_are():
    imports = _imports()
    assert "sglang.srt.server_args" not in imports["sglang.srt.platforms.interface"]  # under TYPE_CHECKING
    assert "sglang.srt.arg_groups.pipeline" in imports["sglang.srt.bootstrap"]


def test_the_check_sees_function_local_imports_and_finds_a_cycle():
    imports = _imports()
    assert "sglang.srt.plugins" in imports["sglang.srt.bootstrap"]  # imported inside bootstrap()
    assert any("sglang.srt.server_args" in c for c in _cycles())  # the known cycle is really found
