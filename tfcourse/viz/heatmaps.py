"""Heatmaps with labelled axes; panels that are compared share one colour scale and one
colour bar (seaborn draws each panel)."""

import matplotlib.pyplot as plt
import numpy as np

from tfcourse.viz.common import as_array, heatmap, show_token


def draw_heatmap(matrix, rows=None, cols=None, *, ax=None, vmin=0.0, vmax=None, cmap="magma_r",
                 center=None, cbar=True, cbar_ax=None, title=None, xlabel="key", ylabel="query",
                 annot=False):
    """One matrix (rows x cols), e.g. attention weights (q_len, k_len), with the tokens as tick
    labels (a space shown as '␣'). Returns the Axes."""
    m = as_array(matrix, "matrix")
    if m.ndim != 2:
        raise ValueError(f"matrix must be 2-D (rows, cols), got shape {m.shape}")
    for name, labels, n in (("rows", rows, m.shape[0]), ("cols", cols, m.shape[1])):
        if labels is not None and len(labels) != n:
            raise ValueError(f"{name} must have {n} labels (matrix {m.shape}), got {len(labels)}")
    if ax is None:
        _, ax = plt.subplots(figsize=(0.3 * m.shape[1] + 1.8, 0.3 * m.shape[0] + 1.0))
    heatmap(m, ax=ax, vmin=vmin, vmax=vmax, cmap=cmap, center=center, cbar=cbar,
                cbar_ax=cbar_ax, square=False, annot=annot, fmt=".2f",
                xticklabels=[show_token(t) for t in cols] if cols is not None else "auto",
                yticklabels=[show_token(t) for t in rows] if rows is not None else "auto")
    ax.tick_params(length=0, labelsize=8)
    ax.set_yticklabels(ax.get_yticklabels(), rotation=0)
    ax.set_xlabel(xlabel, fontsize=9)
    ax.set_ylabel(ylabel, fontsize=9)
    if title:
        ax.set_title(title, fontsize=10)
    return ax


def draw_heatmaps(matrices, rows=None, cols=None, *, titles=None, ncols=None, vmin=0.0,
                  vmax=None, cmap="magma_r", center=None, xlabel="key", ylabel="query",
                  suptitle=None, cbar_label="attention weight", panel_size=None):
    """Several matrices of one shape side by side on ONE colour scale with one colour bar, so
    that the same colour means the same value in every panel (vmax: the largest value of all
    panels unless given). matrices: (n, rows, cols) or a list. Returns the Figure."""
    ms = [as_array(m, "matrices") for m in matrices]
    if not ms or any(m.shape != ms[0].shape or m.ndim != 2 for m in ms):
        raise ValueError(f"matrices must be 2-D and of one shape, got {[m.shape for m in ms]}")
    n = len(ms)
    ncols = min(n, 4) if ncols is None else ncols
    nrows = -(-n // ncols)
    vmax = max(float(np.nanmax(m)) for m in ms) if vmax is None else vmax
    width, height = panel_size or (0.28 * ms[0].shape[1] + 1.2, 0.28 * ms[0].shape[0] + 1.0)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols + 0.8, height * nrows),
                             squeeze=False, layout="constrained")
    for k, ax in enumerate(axes.flat):
        if k >= n:
            ax.axis("off")
            continue
        draw_heatmap(ms[k], rows if k % ncols == 0 else None, cols, ax=ax, vmin=vmin, vmax=vmax,
                     cmap=cmap, center=center, cbar=False, xlabel=xlabel,
                     ylabel=ylabel if k % ncols == 0 else "",
                     title=titles[k] if titles else None)
        if k % ncols:
            ax.set_yticks([])
    colorbar = fig.colorbar(axes.flat[0].collections[0], ax=axes, shrink=0.8)
    colorbar.set_label(cbar_label, fontsize=9)
    if suptitle:
        fig.suptitle(suptitle, fontsize=11)
    return fig
