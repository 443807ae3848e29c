"""Charts of benchmark ratios and autotuning trials (matplotlib, an optional dependency).

- ``pyplot()``: ``matplotlib.pyplot`` on the non-interactive Agg backend, or a
  ``PlottingUnavailable`` error that says how to install it.
- ``ratio_chart(rows, path, ...)``: horizontal bars of ``ours / reference`` ratios, one panel
  per group (e.g. per size and dtype), a line at 1.0.
- ``trials_chart(trials, path, ...)``: each autotuning trial's latency, the best one marked,
  failed trials listed by their reason.
"""

from __future__ import annotations

import math

INSTALL_HINT = "pip install matplotlib  (or: pip install -e '.[plot]')"


class PlottingUnavailable(ImportError):
    """matplotlib is not installed."""


def pyplot():
    """``matplotlib.pyplot`` with the Agg backend; ``PlottingUnavailable`` if it is missing."""
    try:
        import matplotlib
    except ImportError as err:
        raise PlottingUnavailable(
            f"plotting needs matplotlib, which is not installed: {INSTALL_HINT}"
        ) from err
    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def _save(fig, plt, path) -> str:
    fig.tight_layout()
    fig.savefig(str(path), dpi=120)
    plt.close(fig)
    return str(path)


def ratio_chart(rows, path, title: str = "", ratio_label: str = "ratio (higher is better)") -> str:
    """Draw ``rows`` (dicts with ``group``, ``label``, ``ratio``; ``ratio`` None = failed) to ``path``.

    One panel per distinct ``group`` (in first-seen order), one bar per row; returns ``path``.
    """
    rows = list(rows)
    if not rows:
        raise ValueError("ratio_chart: argument 'rows' is empty: nothing to draw")
    for i, row in enumerate(rows):
        missing = {"group", "label", "ratio"} - set(row)
        if missing:
            raise ValueError(f"ratio_chart: rows[{i}] lacks {sorted(missing)}")
    plt = pyplot()
    groups: dict = {}
    for row in rows:
        groups.setdefault(str(row["group"]), []).append(row)
    heights = [max(1.2, 0.32 * len(g) + 0.8) for g in groups.values()]
    fig, axes = plt.subplots(
        len(groups),
        1,
        figsize=(9, sum(heights)),
        gridspec_kw={"height_ratios": heights},
        squeeze=False,
    )
    for ax, (group, members) in zip(axes[:, 0], groups.items()):
        labels = [str(r["label"]) for r in members]
        values = [r["ratio"] if _finite(r["ratio"]) else 0.0 for r in members]
        colors = [
            "#bbbbbb" if not _finite(r["ratio"]) else "#2a7ab9" if r["ratio"] >= 1 else "#e07b39"
            for r in members
        ]
        ys = list(range(len(members)))[::-1]
        ax.barh(ys, values, color=colors)
        ax.set_yticks(ys, labels, fontsize=8)
        ax.axvline(1.0, color="black", linewidth=0.8, linestyle="--")
        for y, r, v in zip(ys, members, values):
            text = f"{r['ratio']:.2f}" if _finite(r["ratio"]) else "failed"
            ax.text(v, y, " " + text, va="center", fontsize=8)
        top = max([1.0, *values])
        ax.set_xlim(0, top * 1.15)
        ax.set_title(group, fontsize=9, loc="left")
    axes[-1, 0].set_xlabel(ratio_label)
    if title:
        fig.suptitle(title, fontsize=11)
    return _save(fig, plt, path)


def trials_chart(trials, path, title: str = "", ref_latency=None) -> str:
    """Draw autotuning ``trials`` (dicts with ``index``, ``config``, ``latency_ms``, ``status``).

    Successful trials as bars of latency (best in a different colour, ``ref_latency`` as a
    dashed line); failed ones named under the chart with their status. Returns ``path``.
    """
    trials = list(trials)
    if not trials:
        raise ValueError("trials_chart: argument 'trials' is empty: nothing to draw")
    plt = pyplot()
    ok = [t for t in trials if t.get("status") == "ok" and _finite(t.get("latency_ms"))]
    failed = [t for t in trials if t not in ok]
    fig, ax = plt.subplots(figsize=(max(6, 0.45 * len(ok) + 2), 4.5))
    if ok:
        best = min(t["latency_ms"] for t in ok)
        xs = list(range(len(ok)))
        ax.bar(
            xs,
            [t["latency_ms"] for t in ok],
            color=["#2a7ab9" if t["latency_ms"] == best else "#9cc3e4" for t in ok],
        )
        ax.set_xticks(
            xs, [_config_text(t["config"]) for t in ok], rotation=60, ha="right", fontsize=7
        )
        if _finite(ref_latency):
            ax.axhline(ref_latency, color="black", linestyle="--", linewidth=0.8, label="reference")
            ax.legend(fontsize=8)
    ax.set_ylabel("latency (ms)")
    if failed:
        names = ", ".join(f"#{t.get('index')} {t.get('status')}" for t in failed[:12])
        more = f" (+{len(failed) - 12} more)" if len(failed) > 12 else ""
        ax.set_xlabel(f"failed: {names}{more}", fontsize=7)
    ax.set_title(title or f"autotuning: {len(ok)} of {len(trials)} configs ran", fontsize=10)
    return _save(fig, plt, path)


def _config_text(config) -> str:
    if isinstance(config, dict):
        return " ".join(f"{k}={v}" for k, v in config.items())
    return str(config)


def _finite(x) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)
