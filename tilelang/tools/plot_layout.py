"""``plot_layout``: draw a ``T.Layout`` or ``T.Fragment`` as a grid of cells (matplotlib).

A Fragment's grid is its logical tile: each cell shows the thread (``T``) and register slot
(``L``) holding that element, colored by thread (replicated fragments list every thread).
A Layout's grid is its input space (``view="input"``, each cell labelled with the output
coordinate it maps to and colored by the flattened output offset) or its output space
(``view="output"``, each cell labelled with the input coordinate mapped there).
Inputs of more than two dimensions are drawn with the leading ones flattened into rows.
matplotlib is an optional dependency: without it ``plot_layout`` raises ImportError saying so.
"""

from __future__ import annotations

import os

import numpy as np

__all__ = ["plot_layout"]

_FORMATS = ("pdf", "png", "svg")


def _formats(formats) -> list[str]:
    if isinstance(formats, str):
        text = formats.strip().lower()
        items = list(_FORMATS) if text == "all" else [f.strip() for f in text.split(",")]
    elif isinstance(formats, list | tuple):
        items = [str(f).strip().lower() for f in formats]
    else:
        raise TypeError(
            f"plot_layout: formats must be a str or list of str, got {type(formats).__name__}"
        )
    bad = [f for f in items if f not in _FORMATS]
    if bad or not items:
        raise ValueError(f"plot_layout: formats must be from {_FORMATS} or 'all', got {formats!r}")
    return items


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise ImportError(
            "tilelang.tools.plot_layout needs matplotlib, an optional dependency: "
            "pip install matplotlib"
        ) from err
    return plt


def _as_grid(shape, grid_shape=None) -> tuple[int, int]:
    total = int(np.prod(shape)) if len(shape) else 1
    if grid_shape is not None:
        rows, cols = (int(x) for x in grid_shape)
        if rows * cols != total:
            raise ValueError(
                f"plot_layout: grid_shape {tuple(grid_shape)} has {rows * cols} cells, "
                f"the layout's input has {total}"
            )
        return rows, cols
    if len(shape) == 1:
        return 1, int(shape[0])
    return total // int(shape[-1]), int(shape[-1])


def _draw(plt, labels, colors, title, colormap, xlabel, ylabel):
    rows, cols = labels.shape
    size = max(0.55, min(1.2, 14.0 / max(rows, cols)))
    fig, ax = plt.subplots(figsize=(cols * size + 1.5, rows * size + 1.0))
    cmap = plt.get_cmap(colormap)
    vmax = max(1.0, float(colors.max()))
    ax.imshow(colors / vmax, cmap=cmap, vmin=0.0, vmax=1.0, aspect="equal")
    font = max(4.0, min(9.0, 60.0 * size / max(1, max(len(s) for s in labels.flat))))
    for r in range(rows):
        for c in range(cols):
            ax.text(c, r, labels[r, c], ha="center", va="center", fontsize=font)
    ax.set_xticks(range(cols))
    ax.set_yticks(range(rows))
    ax.set_xticks(np.arange(-0.5, cols, 1), minor=True)
    ax.set_yticks(np.arange(-0.5, rows, 1), minor=True)
    ax.grid(which="minor", color="black", linewidth=0.4)
    ax.tick_params(which="both", length=0, labelsize=max(4.0, font))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    return fig


def _fragment_grid(frag, grid_shape):
    shape = [int(s) for s in frag.get_input_shape()]
    threads = frag.thread_table()  # (replicate, *shape)
    local = frag.forward_table()[..., 0] if frag.output_dim == 1 else None
    if local is None:
        out_shape = [int(s) for s in frag.get_output_shape()]
        local = np.ravel_multi_index(np.moveaxis(frag.forward_table(), -1, 0), out_shape)
    rows, cols = _as_grid(shape, grid_shape)
    threads = threads.reshape(threads.shape[0], rows, cols)
    local = local.reshape(rows, cols)
    labels = np.empty((rows, cols), dtype=object)
    for r in range(rows):
        for c in range(cols):
            ts = ",".join(str(int(t)) for t in threads[:, r, c])
            labels[r, c] = f"T{ts}\nL{int(local[r, c])}"
    title = f"Fragment {shape}: {frag.get_thread_size()} threads, replicate {frag.replicate_size}"
    return labels, threads[0].astype(float), title


def _layout_grid(layout, view, grid_shape):
    shape = [int(s) for s in layout.get_input_shape()]
    out_shape = [int(s) for s in layout.get_output_shape()]
    table = layout.forward_table().reshape(-1, layout.output_dim)  # row-major inputs
    in_coords = np.stack(np.unravel_index(np.arange(table.shape[0]), shape), axis=-1)
    offsets = np.ravel_multi_index(table.T, out_shape)
    if view == "input":
        rows, cols = _as_grid(shape, grid_shape)
        labels = np.array([",".join(map(str, t)) for t in table], dtype=object).reshape(rows, cols)
        return (
            labels,
            offsets.reshape(rows, cols).astype(float),
            f"Layout {shape} -> {out_shape} (input view)",
        )
    if grid_shape is not None:
        raise ValueError("plot_layout: grid_shape applies to view='input' only")
    rows, cols = _as_grid(out_shape)
    labels = np.full(rows * cols, "", dtype=object)
    colors = np.zeros(rows * cols)
    for k, off in enumerate(offsets):
        labels[off] = ",".join(map(str, in_coords[k])) if not labels[off] else labels[off] + "|*"
        colors[off] = k
    return (
        labels.reshape(rows, cols),
        colors.reshape(rows, cols),
        f"Layout {shape} -> {out_shape} (output view)",
    )


def plot_layout(
    layout,
    save_directory="./tmp",
    name: str = "layout",
    colormap: str | None = None,
    verbose: bool = False,
    formats="pdf",
    view: str = "input",
    grid_shape=None,
) -> list[str]:
    """Draw ``layout`` (a ``T.Layout`` or ``T.Fragment``) to ``save_directory/name.<format>``.

    ``formats``: ``"pdf"`` (default), ``"png"``, ``"svg"``, ``"all"``, comma-separated or a
    list; ``colormap``: a matplotlib colormap (default ``"RdPu"`` for fragments, ``"Spectral"``
    for layouts); ``view`` / ``grid_shape``: see the module docstring. Returns the files written.
    """
    from ..layout import Fragment, Layout

    if not isinstance(layout, Layout):
        raise TypeError(
            f"plot_layout: layout must be a T.Layout or T.Fragment, got {type(layout).__name__}"
        )
    if view not in ("input", "output"):
        raise ValueError(f"plot_layout: view must be 'input' or 'output', got {view!r}")
    if not isinstance(name, str) or not name:
        raise ValueError(f"plot_layout: name must be a non-empty str, got {name!r}")
    if not layout.is_static():
        raise ValueError(f"plot_layout: layout needs a static shape, got {layout!r}")
    fmts = _formats(formats)
    plt = _pyplot()
    if isinstance(layout, Fragment):
        labels, colors, title = _fragment_grid(layout, grid_shape)
        fig = _draw(plt, labels, colors, title, colormap or "RdPu", "column", "row")
    else:
        labels, colors, title = _layout_grid(layout, view, grid_shape)
        axis = "input" if view == "input" else "output"
        fig = _draw(
            plt, labels, colors, title, colormap or "Spectral", f"{axis} column", f"{axis} row"
        )
    if verbose:
        print(title)
        for row in labels:
            print("  " + "  ".join(s.replace("\n", "/") for s in row))
    os.makedirs(save_directory, exist_ok=True)
    written = []
    for fmt in fmts:
        path = os.path.join(save_directory, f"{name}.{fmt}")
        fig.savefig(path, bbox_inches="tight", dpi=200 if fmt == "png" else None)
        written.append(path)
        if verbose:
            print(f"Saved {fmt} into {path}")
    plt.close(fig)
    return written
