"""``--plot out.png`` for the benchmark scripts: their ratio tables as bar charts.

    parser = argparse.ArgumentParser(...)
    plotting.add_plot_argument(parser)
    args = parser.parse_args()
    plotting.check(args.plot)          # fails at once, before the benchmark, without matplotlib
    ...
    plotting.plot_ratios(rows, args.plot, title="...")   # rows: group, label, ratio

The drawing itself is ``tilelang.tools.plotting.ratio_chart`` (shared with the autotuner's
trial charts); matplotlib is optional: ``pip install matplotlib`` or the ``plot`` extra.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tilelang.tools.plotting import PlottingUnavailable, pyplot, ratio_chart  # noqa: E402


def add_plot_argument(parser) -> None:
    """Add ``--plot PATH`` (an image file; its suffix picks the format) to ``parser``."""
    parser.add_argument(
        "--plot",
        metavar="PATH",
        default=None,
        help="also draw the ratio table to this image (e.g. out.png; needs matplotlib)",
    )


def check(path) -> None:
    """Exit with a clear message now if ``--plot`` was given and matplotlib is missing."""
    if path is None:
        return
    try:
        pyplot()
    except PlottingUnavailable as err:
        raise SystemExit(f"--plot {path}: {err}") from None
    parent = Path(path).resolve().parent
    if not parent.is_dir():
        raise SystemExit(f"--plot {path}: the folder {parent} does not exist")


def plot_ratios(
    rows, path, title: str = "", ratio_label: str = "ratio to torch (higher is better)"
):
    """Draw ``rows`` (dicts: ``group``, ``label``, ``ratio``) to ``path``; prints and returns it."""
    if path is None:
        return None
    out = ratio_chart(rows, path, title=title, ratio_label=ratio_label)
    print(f"plot written to {out}")
    return out
