"""The package layering of docs/architecture.md, checked on the source with ``ast`` (function-local imports included)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "python"
RUNTIMES = ("sglang.srt", "sglang.multimodal_gen")

# The one cycle between packages today: configuration resolution (server_args -> arg_groups -> platforms ->
# ... -> runtime_context -> server_args, pulled through layers and models by the platforms' factories). The
# explicit config-resolution step of the one-spine issue removes it; a new cycle, or this one growing, fails.
# the configuration-resolution cycle; ServerArgs.__new__ -> bootstrap -> load_plugins is part of it (plugins
# load before any ServerArgs, as upstream), and the explicit resolution step is what will break it
KNOWN_CYCLES: list[frozenset[str]] = [frozenset({
    "sglang.srt.arg_groups", "sglang.srt.bootstrap", "sglang.srt.context", "sglang.srt.distributed", "sglang.srt.layers", "sglang.srt.model_executor",
    "sglang.srt.model_loader", "sglang.srt.models", "sglang.srt.platforms", "sglang.srt.plugins", "sglang.srt.runtime_context",
    "sglang.srt.server_args",
})]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports() -> dict[str, set[str]]:
    """module -> the sglang modules it imports anywhere in its source."""
    found: dict[str, set[str]] = {}
    for path in ROOT.joinpath("sglang").rglob("*.py"):
        mod = _module_name(path)
        is_pkg = path.name == "__init__.py"
        out: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                out.update(a.name for a in node.names if a.name.startswith("sglang"))
            elif isinstance(node, ast.ImportFrom):
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


def test_the_check_sees_function_local_imports_and_finds_a_cycle():
    imports = _imports()
    assert "sglang.srt.plugins" in imports["sglang.srt.bootstrap"]  # imported inside bootstrap()
    assert any("sglang.srt.server_args" in c for c in _cycles())  # the known cycle is really found
