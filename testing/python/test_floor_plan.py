"""The floor plan of the ``tilelang`` package: which module may import which (issue 9).

Reads every module of ``tilelang/`` with ``ast`` (nothing is imported) and collects its
imports of tilelang modules: module-level ones and those inside functions, absolute and
relative. ``from pkg import name`` counts as an import of ``pkg.name`` when that is a
module, else of ``pkg``; the implicit import of a module's parent packages is not counted.
Then it checks:

(a) no import cycle spans two top-level folders of tilelang (``cache`` and ``jit``, say):
    strongly connected components of the import graph;
(b) nothing in ``tilelang/ops`` imports ``tilelang/transform`` (the op rules are the
    passes' toolkit, not their users);
(c) no module imports a module of a higher layer of :data:`LAYERS`; a module of the same
    layer is fine. Every module must belong to a layer.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "tilelang"

# Lowest first. An entry names modules by prefix (``"ops"``: ``tilelang.ops`` and everything
# under it); a module takes the layer of its longest matching entry. ``""`` is the top-level
# ``tilelang/__init__.py``, ``"engine"`` the ``tilelang.engine`` package itself (it exports
# ``engine.driver``). Same-layer imports are allowed.
LAYERS: list[tuple[str, ...]] = [
    # ground floor: import nothing of tilelang
    ("errors", "version", "dtypes"),
    # upstream's small helpers that import nothing (or only the ground floor)
    (
        "math",
        "tvm",
        "_logging",
        "utils.tensor",
        "utils.device",
        "utils.deprecated",
        "utils.version",
        "utils.upstream_modules",
        "utils.pyast",
    ),
    ("layout",),
    # the pass configs, the stage runner and the source hooks, shared by every pipeline
    ("engine.pass_config", "engine.instrument", "engine.callback"),
    # the toolkit of op rules and passes
    ("lowering",),
    # tile ops: IR forms, layout and lowering rules
    ("ops",),
    # target-independent passes
    ("transform",),
    # target pipelines, their passes, build and runtime
    ("backends",),
    # the frontend (T.*): builds ops' IR forms; the compiler below never imports it
    ("language",),
    # the disk store of artifacts
    ("cache",),
    # upstream's helper modules: env (reads the cache switches), nvcc, device models, utils;
    # cuda: upstream's hand-written intrinsic emitters (they emit through the frontend)
    ("env", "contrib", "carver", "utils", "cuda"),
    # benchmarks a kernel it is handed (JITKernel.get_profiler returns one, as upstream)
    ("profiler",),
    # compile / jit / JITKernel and the in-memory cache
    ("jit",),
    # users of jit
    ("autotuner", "engine", "engine.driver", "tools"),
    # the CUDA emulator: nothing in the compiler may import it
    ("testing",),
    # tilelang/__init__.py
    ("",),
]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {
        _module_name(p): p for p in sorted(PACKAGE.rglob("*.py")) if "__pycache__" not in p.parts
    }


def _imports(modules: dict[str, Path]) -> dict[str, list[tuple[str, int]]]:
    """``importer -> [(imported tilelang module, line)]``."""

    def owner(name: str) -> str | None:  # the module that ``name`` lives in
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(base + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules]
                targets = subs if len(subs) == len(node.names) else [base, *subs]
            else:
                continue
            for target in targets:
                if target.split(".")[0] != "tilelang":
                    continue
                imported = owner(target)
                if imported is not None and imported != name:
                    graph[name].append((imported, node.lineno))
    return graph


def _folder(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _layer(module: str) -> int | None:
    rel = module.partition(".")[2]
    best, best_len = None, -1
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            matches = rel == prefix or (prefix and rel.startswith(prefix + ".")) or prefix == ""
            if prefix == "" and rel != "":
                matches = False
            if matches and len(prefix) > best_len:
                best, best_len = index, len(prefix)
    return best


def _where(modules, importer: str, line: int) -> str:
    return f"{modules[importer].relative_to(PACKAGE.parent)}:{line}"


def _sccs(nodes, graph) -> list[list[str]]:
    """Tarjan's strongly connected components (iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted({t for t, _ in graph.get(root, ())})))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted({t for t, _ in graph.get(child, ())}))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                out.append(sorted(component))
    return out


def _report(title: str, lines: list[str]) -> str:
    return f"{title} ({len(lines)}):\n  " + "\n  ".join(lines)


def test_every_module_has_a_layer():
    missing = sorted(m for m in _modules() if _layer(m) is None)
    assert not missing, _report("modules in no layer of LAYERS", missing)


def test_no_import_cycle_across_folders():
    modules = _modules()
    graph = _imports(modules)
    problems = []
    for component in _sccs(sorted(modules), graph):
        if len({_folder(m) for m in component}) < 2:
            continue
        members = set(component)
        edges = [
            f"{_where(modules, a, line)}: {a} -> {b}"
            for a in component
            for b, line in graph.get(a, ())
            if b in members and _folder(a) != _folder(b)
        ]
        problems.append(f"cycle through {', '.join(component)}\n    " + "\n    ".join(edges))
    assert not problems, _report("import cycles spanning folders", problems)


def test_ops_do_not_import_transform():
    modules = _modules()
    bad = [
        f"{_where(modules, a, line)}: {a} -> {b}"
        for a, targets in _imports(modules).items()
        if _folder(a) == "ops"
        for b, line in targets
        if _folder(b) == "transform"
    ]
    assert not bad, _report("tilelang/ops importing tilelang/transform", bad)


def test_no_import_from_a_higher_layer():
    modules = _modules()
    bad = []
    for a, targets in sorted(_imports(modules).items()):
        for b, line in targets:
            la, lb = _layer(a), _layer(b)
            if la is not None and lb is not None and lb > la:
                bad.append(
                    f"{_where(modules, a, line)}: {a} (layer {la}: {'/'.join(LAYERS[la]) or 'tilelang'})"
                    f" imports {b} (layer {lb}: {'/'.join(LAYERS[lb]) or 'tilelang'})"
                )
    assert not bad, _report("imports from a higher layer", bad)
