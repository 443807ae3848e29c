"""Benchmark runners of upstream's ``regression_*.py`` example scripts.

A script defines ``regression_<case>()`` functions that each call
``process_func(run_regression_perf, ...)``; ``regression()`` runs them all (or those matching
``TL_PERF_REGRESSION_ONLY``, comma-separated or a JSON list of globs/substrings) and prints one
``name: latency`` line per result, or with ``TL_PERF_REGRESSION_FORMAT=json`` a single
``__TILELANG_PERF_RESULTS_JSON__=[...]`` line.
"""

from __future__ import annotations

import fnmatch
import inspect
import json
import os
import time
import warnings
from dataclasses import dataclass

__all__ = ["PerfResult", "process_func", "regression", "results"]

JSON_PREFIX = "__TILELANG_PERF_RESULTS_JSON__="
_RETRIES = 5


@dataclass(frozen=True)
class PerfResult:
    """One recorded latency: the function's name, the value it returned, the running case."""

    name: str
    latency: float
    case: str | None = None


_results: list[PerfResult] = []
_case: list[str | None] = [None]


def results() -> list[PerfResult]:
    """The latencies recorded since the last :func:`regression` started (a copy)."""
    return list(_results)


def process_func(func, name: str | None = None, /, **kwargs) -> None:
    """Call ``func(**kwargs)``, which returns a latency, and record it under ``name``.

    ``name`` defaults to ``func``'s module (a ``regression_`` prefix is dropped). A latency
    <= 0 is retried up to 5 times, then skipped with a RuntimeWarning.
    """
    if not callable(func):
        raise TypeError(f"process_func: func must be callable, got {type(func).__name__}")
    label = getattr(func, "__module__", "<unknown>") if name is None else name
    label = label.removeprefix("regression_")
    latency = float(func(**kwargs))
    tries = 0
    while latency <= 0.0 and tries < _RETRIES:
        latency = float(func(**kwargs))
        tries += 1
    if latency <= 0.0:
        warnings.warn(f"{label} has latency {latency} <= 0; result dropped", RuntimeWarning, 2)
        return
    _results.append(PerfResult(label, latency, _case[0]))


def _filters() -> list[str]:
    text = os.environ.get("TL_PERF_REGRESSION_ONLY", "").strip()
    if not text:
        return []
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = text.split(",")
    if isinstance(value, str):
        value = [value]
    return [str(v).strip() for v in value if str(v).strip()] if isinstance(value, list) else []


def _selected(name: str, filters: list[str]) -> bool:
    if not filters:
        return True
    short = name.removeprefix("regression_")
    for pattern in filters:
        p = pattern.lower()
        for candidate in (name.lower(), short.lower()):
            if fnmatch.fnmatch(candidate, p) or p in candidate:
                return True
    return False


def _emit() -> None:
    if os.environ.get("TL_PERF_REGRESSION_FORMAT", "text").strip().lower() == "json":
        rows = [
            {"name": r.name, "latency": r.latency, **({"case": r.case} if r.case else {})}
            for r in _results
        ]
        print(JSON_PREFIX + json.dumps(rows, separators=(",", ":")))
        return
    for r in _results:
        print(f"{r.name}: {r.latency}")


def regression(prefixes=("regression_",), verbose: bool = True) -> None:
    """Run every callable named ``<prefix>...`` in the caller's module (sorted by name) and
    print the latencies they recorded with :func:`process_func`."""
    if isinstance(prefixes, str):
        prefixes = (prefixes,)
    caller = inspect.currentframe().f_back.f_globals
    _results.clear()
    filters = _filters()
    cases = sorted(
        (k, v)
        for k, v in list(caller.items())
        if callable(v) and any(k.startswith(p) for p in prefixes) and _selected(k, filters)
    )
    for i, (name, fn) in enumerate(cases, 1):
        _case[0] = name.removeprefix("regression_")
        if verbose:
            print(f"  ├─ [{i}/{len(cases)}] {_case[0]}", end="", flush=True)
        start = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fn()
        finally:
            _case[0] = None
        if verbose:
            print(f" ({time.perf_counter() - start:.2f}s)", flush=True)
    _emit()
