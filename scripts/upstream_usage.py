"""Which tilelang names upstream's example programs and language tests use.

Used by scripts/api_coverage.py (``--upstream-src``); also runnable on its own::

    python3 scripts/upstream_usage.py /path/to/upstream/checkout

It parses (with ``ast``, never imports) every ``*.py`` file under the checkout's ``examples/``
and ``testing/python/language/`` and collects each tilelang name they reach: attribute chains
on a name bound to a tilelang module (``T.alloc_shared``, ``tilelang.compile``,
``tilelang.language.Kernel``, ``tilelang.testing.main``) and ``from tilelang.x import y``.
A use is reported as ``(module, name)``: ``module`` is the deepest prefix of the dotted path
that is a module in the checkout's ``tilelang/`` tree, ``name`` the next component.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

SCANNED_DIRS = ("examples", "testing/python/language")


class _ModuleTree:
    """Answers "is this dotted path a module?" from the checkout's ``tilelang/`` sources."""

    def __init__(self, root: Path):
        self.root = root

    def is_module(self, dotted: str) -> bool:
        path = self.root.joinpath(*dotted.split("."))
        return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()

    def split(self, dotted: str) -> tuple[str, str] | None:
        """``"tilelang.language.Kernel"`` -> ``("tilelang.language", "Kernel")``."""
        parts = dotted.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            module = ".".join(parts[:cut])
            if self.is_module(module):
                return module, parts[cut]
        return None


def _dotted(node: ast.AST) -> list[str] | None:
    """``a.b.c`` -> ["a", "b", "c"]; None for anything that is not a plain attribute chain."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return parts[::-1]
    return None


def names_used_in(source: str, tree: _ModuleTree) -> set[tuple[str, str]]:
    """The ``(module, name)`` pairs one file uses (empty if it does not parse)."""
    try:
        module_ast = ast.parse(source)
    except SyntaxError:
        return set()
    aliases: dict[str, str] = {}  # local name -> dotted tilelang module path
    used: set[tuple[str, str]] = set()
    for node in ast.walk(module_ast):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] != "tilelang":
                    continue
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:  # `import tilelang.testing` binds `tilelang`
                    aliases["tilelang"] = "tilelang"
                parts = alias.name.split(".")
                for cut in range(1, len(parts)):
                    used.add((".".join(parts[:cut]), parts[cut]))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] != "tilelang":
                continue
            parts = node.module.split(".")
            for cut in range(1, len(parts)):
                used.add((".".join(parts[:cut]), parts[cut]))
            for alias in node.names:
                if alias.name == "*":
                    continue
                used.add((node.module, alias.name))
                full = f"{node.module}.{alias.name}"
                if tree.is_module(full):
                    aliases[alias.asname or alias.name] = full
    for node in ast.walk(module_ast):
        if not isinstance(node, ast.Attribute):
            continue
        parts = _dotted(node)
        if not parts or parts[0] not in aliases:
            continue
        pair = tree.split(".".join([aliases[parts[0]], *parts[1:]]))
        if pair:
            used.add(pair)
    return used


def scan(checkout: Path) -> dict[tuple[str, str], list[str]]:
    """{(module, name): [files using it, relative to the checkout]} over ``SCANNED_DIRS``."""
    checkout = Path(checkout)
    if not (checkout / "tilelang" / "__init__.py").is_file():
        raise SystemExit(f"{checkout} is not an upstream tilelang checkout (no tilelang/)")
    tree = _ModuleTree(checkout)
    users: dict[tuple[str, str], list[str]] = defaultdict(list)
    for sub in SCANNED_DIRS:
        for path in sorted((checkout / sub).rglob("*.py")):
            rel = str(path.relative_to(checkout))
            for pair in names_used_in(path.read_text(errors="replace"), tree):
                users[pair].append(rel)
    return dict(users)


def main() -> int:
    """Print the names used, most-used first."""
    if len(sys.argv) != 2:
        raise SystemExit(f"usage: {sys.argv[0]} UPSTREAM_CHECKOUT")
    users = scan(Path(sys.argv[1]))
    for (module, name), files in sorted(users.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        print(f"{len(files):4d}  {module}.{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())


# ---- the report section (used by scripts/api_coverage.py) ----

SECTION_TITLE = "Names used by upstream examples and language tests"


def is_reported(name: str) -> bool:
    """Private names (``_x``) and dunders (``__all__``) are not API; ``T.__exp`` and the other
    ``__``-prefixed intrinsics are."""
    if name.startswith("__"):
        return not name.endswith("__")
    return not name.startswith("_")


def recorded_usage(report_text: str) -> tuple[dict[tuple[str, str], tuple[int, str]], str]:
    """({(module, name): (file count, an example file)}, label) as the current report's
    section recorded them; ({}, "") when it has none."""
    parts = report_text.split(f"\n## {SECTION_TITLE}\n", 1)
    if len(parts) < 2:
        return {}, ""
    body = parts[1].split("\n## ", 1)[0]
    label = ""
    users = {}
    for line in body.splitlines():
        if line.startswith("Scanned: "):
            label = line[len("Scanned: ") :].strip()
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 5 and cells[0].startswith("`") and cells[1].isdigit():
            module, _, name = cells[0].strip("`").rpartition(".")
            users[(module, name)] = (int(cells[1]), cells[2].strip("`"))
    return users, label


def usage_section(usage: dict[tuple[str, str], tuple[int, str]], label: str, state_of) -> str:
    """The report section: one row per used name, most-used first, and a count line.

    ``state_of(module, name)`` returns (category, here, note) with category one of
    "present", "error" (a clear per-target or explanatory error everywhere) or "missing".
    """
    rows, counts, t_counts = (
        [],
        {"present": 0, "error": 0, "missing": 0},
        dict.fromkeys(("present", "error", "missing"), 0),
    )
    ordered = sorted(usage.items(), key=lambda kv: (-kv[1][0], kv[0]))
    differ = 0
    for (module, name), (count, example) in ordered:
        if not is_reported(name):
            continue
        category, here, note = state_of(module, name)
        counts[category] += 1
        differ += "signature differs" in note
        if module == "tilelang.language":
            t_counts[category] += 1
        rows.append(f"| `{module}.{name}` | {count} | `{example}` | {here} | {note} |")
    total, t_total = sum(counts.values()), sum(t_counts.values())
    out = [
        f"## {SECTION_TITLE}",
        "",
        "Every tilelang name that upstream's `examples/` and `testing/python/language/` use "
        "(`T.<name>`, `tilelang.<name>`, `tilelang.x.<name>`, `from tilelang.x import name`; "
        "found by `scripts/upstream_usage.py`), with the number of upstream files using it "
        "and its state here. **present** names work on at least one target (the notes say "
        "where they refuse); **error**: reading or using the name raises a clear error on "
        "every target (it names the op and the target, or why it is not provided); "
        "**missing**: not here (the notes give the reason).",
        "",
        f"Scanned: {label}",
        "",
        f"**Used names: {total}; present {counts['present']}, clear error {counts['error']}, "
        f"missing {counts['missing']}.** Of them `tilelang.language` (T.*): {t_total}; "
        f"present {t_counts['present']}, clear error {t_counts['error']}, "
        f"missing {t_counts['missing']}. Signatures that differ from upstream's (see the "
        f"notes): {differ}.",
        "",
        "| name | upstream files | e.g. | here | notes |",
        "|---|---|---|---|---|",
        *rows,
        "",
    ]
    return "\n".join(out)
