"""The trials of an autotuning run: one row per config, as CSV and as a chart.

``AutotuneResult.trials`` holds, per candidate config in order: ``index``, ``config`` (dict),
``status`` (``ok``, or the stage that rejected it: ``trace``, ``compile``, ``benchmark``),
``latency_ms`` (None unless ok), ``error`` (the reason, "" when ok).
``result.write_trials_csv(path)`` and ``result.plot_trials(path)`` (matplotlib) export them.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

FIXED_COLUMNS = ["index", "status", "latency_ms", "best", "ref_latency_ms"]


def trial_rows(configs, latencies: dict, failures: dict) -> list[dict]:
    """One dict per config from the tuner's latencies and failures (both keyed by index)."""
    rows = []
    for i, config in enumerate(configs):
        reason = failures.get(i, "")
        if i in latencies:
            status, latency = "ok", latencies[i]
        else:
            status = reason.split(":", 1)[0] if reason else "skipped"
            latency = None
        rows.append(
            {
                "index": i,
                "config": dict(config),
                "status": status,
                "latency_ms": latency,
                "error": reason,
            }
        )
    return rows


def _rows_of(result) -> list[dict]:
    if result.trials:
        return result.trials
    if result.config is not None:  # a stored result: nothing was benchmarked in this run
        return [
            {
                "index": None,
                "config": dict(result.config),
                "status": "stored" if result.from_disk else "ok",
                "latency_ms": result.latency,
                "error": "",
            }
        ]
    return []


def _cell(value):
    if value is None:
        return ""
    if isinstance(value, str | int | float | bool):
        return value
    return json.dumps(value, default=repr)


def write_trials_csv(result, path) -> str:
    """Write ``result``'s trials to ``path``: the fixed columns, one column per config key, error."""
    rows = _rows_of(result)
    if not rows:
        raise ValueError("write_trials_csv: this AutotuneResult has no trials to write")
    keys: list = []
    for row in rows:
        for k in row["config"]:
            if k not in keys:
                keys.append(k)
    best = result.config
    path = Path(path)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([*FIXED_COLUMNS, *keys, "error"])
        for row in rows:
            writer.writerow(
                [
                    _cell(row["index"]),
                    row["status"],
                    _cell(row["latency_ms"]),
                    int(row["status"] in ("ok", "stored") and row["config"] == best),
                    _cell(result.ref_latency),
                    *[_cell(row["config"].get(k)) for k in keys],
                    row.get("error", ""),
                ]
            )
    return str(path)


def plot_trials(result, path, title: str = "") -> str:
    """Draw ``result``'s trials to ``path`` (see ``tilelang.tools.plotting.trials_chart``)."""
    from ..tools.plotting import trials_chart

    rows = _rows_of(result)
    if not rows:
        raise ValueError("plot_trials: this AutotuneResult has no trials to draw")
    return trials_chart(rows, path, title=title, ref_latency=result.ref_latency)
