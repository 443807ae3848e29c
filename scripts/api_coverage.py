#!/usr/bin/env python3
"""Compare tilelang's public API with upstream TileLang's and write docs/api-coverage.md.

Usage (from anywhere; re-run after adding names)::

    python3 scripts/api_coverage.py                     # writes docs/api-coverage.md
    python3 scripts/api_coverage.py --check             # exit 1 if the file is out of date
    UPSTREAM_PYTHON=/path/to/python python3 scripts/api_coverage.py
    python3 scripts/api_coverage.py --upstream-src /path/to/upstream/checkout \
        --upstream-label "tile-ai/tilelang@<commit>"   # re-scan upstream's examples and tests

Upstream's names are listed by running the upstream venv's interpreter (``--upstream-python``,
``$UPSTREAM_PYTHON``, default ``/work/upstream-venv/bin/python``) outside this repository, so
its ``tilelang`` is upstream's. A module's public names are those not starting with ``_``,
minus incidental imports (stdlib / third-party modules and classes, typing constructs), which
are counted but not listed. Each name is then looked up here: ``present`` (with the kind of
object), ``error`` (the attribute exists as an explanation: reading it raises AttributeError
with a message, e.g. ``tilelang.tvm.arith``) or ``missing``. ``PROBES`` (scripts/api_probes.py)
runs small calls on this machine and reports the outcome (e.g. CPU ok / RuntimeError without a
GPU); ``NOT_PROVIDED`` there gives the reason for deliberate gaps.

The last section lists every name upstream's ``examples/`` and ``testing/python/language/``
use (found by scripts/upstream_usage.py in a checkout given with ``--upstream-src``; without
it, the names and file counts recorded in the current report are re-checked), with its state
here; ``TARGET_LIMITS`` (api_probes.py) says on which targets a present name refuses with a
clear "not supported on <target>" error.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

# Modules compared, in report order. Add a module here to cover it.
MODULES = [
    "tilelang",
    "tilelang.language",
    "tilelang.layout",
    "tilelang.testing",
    "tilelang.utils",
    "tilelang.utils.tensor",
    "tilelang.utils.device",
    "tilelang.profiler",
    "tilelang.env",
    "tilelang.math",
    "tilelang.cache",
    "tilelang.contrib.nvcc",
    "tilelang.carver.arch",
    "tilelang.carver.arch.driver",
    "tilelang.tools",
    "tilelang.tvm",
]

_UPSTREAM_DUMP = r"""
import importlib, inspect, json, sys, types, warnings
warnings.filterwarnings("ignore")
API_ROOTS = {"tilelang", "tvm", "tvm_ffi"}
NOT_API_TYPES = {"typing", "__future__", "typing_extensions", "collections.abc"}
def kind_of(obj):
    if isinstance(obj, types.ModuleType): return "module"
    if inspect.isclass(obj): return "class"
    if callable(obj): return "function"
    return "value"
TVM_API_MODULES = {"tilelang", "tilelang.language", "tilelang.tvm"}
def is_api(modname, name, obj):
    tvm_ok = modname in TVM_API_MODULES
    if isinstance(obj, types.ModuleType):
        root = obj.__name__.split(".")[0]
        return root == "tilelang" or (tvm_ok and root in API_ROOTS)
    if inspect.isclass(obj) or inspect.isfunction(obj) or inspect.isbuiltin(obj):
        root = (getattr(obj, "__module__", None) or "").split(".")[0]
        return root == "tilelang" or (tvm_ok and root in API_ROOTS)
    return type(obj).__module__ not in NOT_API_TYPES
def load(modname):
    try:
        return importlib.import_module(modname)
    except ImportError:
        parent, _, attr = modname.rpartition(".")
        obj = getattr(importlib.import_module(parent), attr, None) if parent else None
        if isinstance(obj, types.ModuleType):
            return obj
        raise
out = {}
for modname in sys.argv[1:]:
    try:
        mod = load(modname)
    except Exception as err:
        out[modname] = {"error": f"{type(err).__name__}: {err}"}
        continue
    names, incidental = {}, []
    for n in sorted(dir(mod)):
        if n.startswith("_") or n == "TYPE_CHECKING": continue
        try: obj = getattr(mod, n)
        except Exception: continue
        if is_api(modname, n, obj): names[n] = kind_of(obj)
        else: incidental.append(n)
    params = {}
    for n in names:
        obj = getattr(mod, n, None)
        if inspect.isclass(obj) or not callable(obj): continue
        try: sig = inspect.signature(obj)
        except Exception: continue
        params[n] = [[p.name, p.kind.name] for p in sig.parameters.values() if p.name != "span"]
    out[modname] = {"names": names, "incidental": incidental, "params": params}
print("@@JSON@@" + json.dumps(out))
"""


def upstream_names(python: str, modules: list[str]) -> dict:
    """{module: {"names": {name: kind}, "incidental": [...]}} from upstream's interpreter."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run(
            [python, "-c", _UPSTREAM_DUMP, *modules],
            cwd=tmp,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    for line in proc.stdout.splitlines():
        if line.startswith("@@JSON@@"):
            return json.loads(line[len("@@JSON@@") :])
    if len(modules) > 1:  # one module crashed the interpreter: list each on its own
        out = {}
        for modname in modules:
            try:
                out.update(upstream_names(python, [modname]))
            except SystemExit as failure:
                out[modname] = {"crashed": str(failure).splitlines()[-1][:200]}
        return out
    raise SystemExit(f"upstream listing failed ({python}):\n{proc.stdout}\n{proc.stderr}")


def recorded_upstream(path: Path, modname: str, why: str) -> dict:
    """The upstream names of ``modname`` as the last generated report recorded them (its
    table's "upstream kind" column), for a module upstream's interpreter cannot import now."""
    text = path.read_text() if path.exists() else ""
    section = text.split(f"\n## `{modname}`\n", 1)
    summary = [ln for ln in text.splitlines() if ln.startswith(f"| `{modname}` |")]
    if len(section) < 2 or not summary:
        return {"error": f"upstream interpreter crashed ({why}) and no earlier listing"}
    names = {}
    for line in section[1].split("\n## ", 1)[0].splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) >= 2 and cells[0].startswith("`"):
            names[cells[0].strip("`")] = cells[1]
    incidental = int(summary[0].strip("|").split("|")[5].strip() or 0)
    print(f"note: upstream {modname} crashed ({why}); reusing its recorded listing")
    return {"names": names, "incidental": [""] * incidental}


def _kind(obj) -> str:
    import inspect
    import types

    if isinstance(obj, types.ModuleType):
        return "module"
    if inspect.isclass(obj):
        return "class"
    return "function" if callable(obj) else "value"


def local_state(modname: str, name: str) -> tuple[str, str]:
    """("present", kind) | ("error", message) | ("missing", why)."""
    try:
        mod = importlib.import_module(modname)
    except Exception as err:  # noqa: BLE001
        explained = _explained_import_error(err)
        if explained:
            return "error", explained
        return "missing", f"module not importable: {type(err).__name__}"
    try:
        obj = getattr(mod, name)
    except AttributeError as err:
        msg = str(err)
        if "has no attribute" in msg:
            try:  # an upstream submodule that tilelang explains (tilelang/utils/upstream_modules.py)
                importlib.import_module(f"{modname}.{name}")
            except Exception as import_err:  # noqa: BLE001
                explained = _explained_import_error(import_err)
                if explained:
                    return "error", explained
            return "missing", ""
        return "error", msg
    return "present", _kind(obj)


def _explained_import_error(err: Exception) -> str:
    """The message of a ModuleNotFoundError that says why the module is absent ('' for a
    bare "No module named ...")."""
    msg = str(err)
    if isinstance(err, ModuleNotFoundError) and ": it is " in msg:
        return "import raises ModuleNotFoundError: " + msg.split(": it is ", 1)[1]
    return ""


def attribute_chain(dotted: str):
    """What ``tilelang.a.b`` evaluates to in user code (attribute by attribute from the
    package, e.g. ``tilelang.env`` is an object there), or None when it fails."""
    parts = dotted.split(".")
    try:
        obj = importlib.import_module(parts[0])
        for part in parts[1:]:
            obj = getattr(obj, part)
    except Exception:  # noqa: BLE001 - not reachable that way
        return None
    return obj


def signature_difference(modname: str, name: str, upstream_params: dict | None) -> str:
    """'' when ``modname.name`` takes upstream's parameters (by name, positional ones in
    upstream's order), else a note naming what differs."""
    import inspect

    wanted = (upstream_params or {}).get(modname, {}).get(name)
    obj = attribute_chain(f"{modname}.{name}")
    if not wanted or obj is None or inspect.isclass(obj) or not callable(obj):
        return ""
    try:
        here = list(inspect.signature(obj).parameters.values())
    except (TypeError, ValueError):
        return ""
    kinds = {p.kind.name for p in here}
    positional = ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD")
    up_pos = [n for n, kind in wanted if kind in positional]
    here_pos = [p.name for p in here if p.kind.name in positional]
    notes = []
    if "VAR_POSITIONAL" not in kinds and here_pos[: len(up_pos)] != up_pos[: len(here_pos)]:
        notes.append(
            f"positional parameters ({', '.join(here_pos)}), upstream ({', '.join(up_pos)})"
        )
    if "VAR_KEYWORD" not in kinds:
        names = {p.name for p in here}
        lacking = [
            n
            for n, kind in wanted
            if kind not in ("VAR_POSITIONAL", "VAR_KEYWORD") and n not in names
        ]
        if lacking:
            notes.append(f"upstream keyword(s) not accepted: {', '.join(lacking)}")
    return "signature differs: " + "; ".join(notes) if notes else ""


def used_state(
    modname: str, name: str, upstream_params: dict | None = None
) -> tuple[str, str, str]:
    """(category, here, note) of a name upstream's examples or tests use (see upstream_usage)."""
    from api_probes import TARGET_LIMITS, not_provided_reason

    key = f"{modname}:{name}"
    state, detail = local_state(modname, name)
    if state == "missing":
        try:
            importlib.import_module(f"{modname}.{name}")
            state, detail = "present", "module"
        except Exception:  # noqa: BLE001 - not a module here either
            found = attribute_chain(f"{modname}.{name}")
            if found is not None:
                state, detail = "present", _kind(found)
    if state == "present":
        works, text = TARGET_LIMITS.get(key, (True, ""))
        differs = signature_difference(modname, name, upstream_params)
        if differs:
            text = f"{text}; {differs}" if text else differs
        return ("present", detail, _cell(text)) if works else ("error", "error", _cell(text))
    if state == "error":
        return "error", "error", _cell(detail)
    return "missing", "missing", not_provided_reason(modname, name)


def run_probe(probe) -> str:
    try:
        result = probe()
    except Exception as err:  # noqa: BLE001 - the outcome is the report
        text = str(err).splitlines()[0] if str(err) else ""
        return f"{type(err).__name__}: {text[:110]}"
    return result if isinstance(result, str) else "ok"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def build_report(upstream: dict) -> str:
    from api_probes import NOT_PROVIDED, PROBES

    rows_by_module, totals = {}, {"names": 0, "present": 0, "error": 0, "missing": 0}
    summary = []
    for modname in MODULES:
        info = upstream.get(modname, {})
        if "error" in info:
            summary.append((modname, None, info["error"]))
            continue
        counts = {"present": 0, "error": 0, "missing": 0}
        rows = []
        for name, kind in info["names"].items():
            state, detail = local_state(modname, name)
            counts[state] += 1
            key = f"{modname}:{name}"
            note = ""
            if key in PROBES:
                note = "probe: " + run_probe(PROBES[key])
            if state != "present" and key in NOT_PROVIDED:
                note = (note + "; " if note else "") + NOT_PROVIDED[key]
            elif state == "error":
                note = (note + "; " if note else "") + detail
            here = detail if state == "present" else state
            rows.append((name, kind, here, note))
        rows_by_module[modname] = rows
        n = len(info["names"])
        totals["names"] += n
        for k in counts:
            totals[k] += counts[k]
        summary.append((modname, (n, counts, len(info["incidental"])), ""))

    out = [
        "# API coverage against upstream TileLang",
        "",
        "Generated by `python3 scripts/api_coverage.py` (re-run it after adding names; do not "
        "edit by hand). Upstream: the TileLang release installed in the upstream venv.",
        "",
        f"**Total: {totals['present']} of {totals['names']} upstream public names present, "
        f"{totals['error']} raise an explanatory error, {totals['missing']} missing.**",
        "",
        "| module | upstream names | present | error | missing | incidental imports (not listed) |",
        "|---|---|---|---|---|---|",
    ]
    for modname, data, err in summary:
        if data is None:
            out.append(f"| `{modname}` | (upstream import failed: {_cell(err)}) | | | | |")
            continue
        n, c, inc = data
        out.append(
            f"| `{modname}` | {n} | {c['present']} | {c['error']} | {c['missing']} | {inc} |"
        )
    out += [
        "",
        "States: **present** (followed by the kind of object here), **error** (reading it raises "
        "an AttributeError, or importing it a ModuleNotFoundError, that explains why it is not "
        "provided), **missing**. "
        '"probe" is the outcome of a small call on the machine that generated this file '
        '(`scripts/api_probes.py`); "ok" means it ran.',
        "",
    ]
    for modname in MODULES:
        if modname not in rows_by_module:
            continue
        out += [
            f"## `{modname}`",
            "",
            "| name | upstream kind | here | notes |",
            "|---|---|---|---|",
        ]
        for name, kind, here, note in rows_by_module[modname]:
            out.append(f"| `{name}` | {kind} | {here} | {_cell(note)} |")
        out.append("")
    return "\n".join(out)


def usage_report(
    path: Path, checkout: str | None, label: str | None, upstream: dict | None = None
) -> str:
    """The "names used by upstream examples and language tests" section."""
    import upstream_usage

    if checkout:
        users = upstream_usage.scan(Path(checkout))
        usage = {pair: (len(files), files[0]) for pair, files in users.items()}
        label = label or str(checkout)
    else:
        usage, recorded_label = upstream_usage.recorded_usage(
            path.read_text() if path.exists() else ""
        )
        if not usage:
            return ""
        label = label or recorded_label
    params = {mod: info.get("params", {}) for mod, info in (upstream or {}).items()}
    return upstream_usage.usage_section(
        usage, label, lambda mod, name: used_state(mod, name, params)
    )


def main() -> int:
    """Write (or with ``--check`` verify) docs/api-coverage.md."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--upstream-python",
        default=os.environ.get("UPSTREAM_PYTHON", "/work/upstream-venv/bin/python"),
    )
    parser.add_argument("--output", default=str(REPO / "docs" / "api-coverage.md"))
    parser.add_argument("--check", action="store_true", help="fail if the output would change")
    parser.add_argument(
        "--upstream-src",
        help="an upstream checkout whose examples/ and testing/python/language/ are scanned "
        "(default: re-check the names recorded in the current report)",
    )
    parser.add_argument("--upstream-label", help="what --upstream-src is (e.g. repo@commit)")
    args = parser.parse_args()
    if not Path(args.upstream_python).exists():
        raise SystemExit(f"no upstream interpreter at {args.upstream_python} (--upstream-python)")
    path = Path(args.output)
    upstream = upstream_names(args.upstream_python, MODULES)
    for modname, info in list(upstream.items()):
        if "crashed" in info:
            upstream[modname] = recorded_upstream(path, modname, info["crashed"])
    report = build_report(upstream) + "\n"
    usage = usage_report(path, args.upstream_src, args.upstream_label, upstream)
    report += usage
    if args.check:
        current = path.read_text() if path.exists() else ""
        if current != report:
            print(f"{path} is out of date: run python3 scripts/api_coverage.py")
            return 1
        return 0
    path.write_text(report)
    print(report.split("\n## ")[0])
    print("\n".join(line for line in usage.splitlines() if line.startswith("**Used names")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
