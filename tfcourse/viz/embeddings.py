"""The embedding space drawn in two dimensions: each token's learned vector projected on the
two directions along which the vectors differ most (principal component analysis), and
what adding the positional encoding does to them.

PCA: centre the rows X (n, d) on their mean, take the singular value decomposition
X - mean = U S V^T; the first k rows of V^T are the directions, (X - mean) V_k the
coordinates, and S_i^2 / sum S^2 the share of the spread that direction i explains.
"""

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch

from tfcourse.viz.common import as_array, head_colors, show_token

GROUP_MARKERS = "os^Dv<>Ph*"  # draw_groups: one marker per group, beside its colour


def pca(x: torch.Tensor | np.ndarray, k: int = 2) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rows of x (n, d) on their first k principal directions, in float64.

    Returns (coords (n, k), directions (k, d), explained (k,) share of the variance). A
    direction's sign is arbitrary in the SVD (it can differ between machines); here each one
    is turned so that the row with the largest coordinate along it is positive, so the
    picture is the same everywhere.
    """
    x = as_array(x, "x").astype(np.float64)
    if x.ndim != 2 or x.shape[0] < 2 or not 1 <= k <= min(x.shape):
        raise ValueError(f"x must be (n, d) with n >= 2 and k in [1, {min(x.shape)}], "
                         f"got shape {x.shape} and k={k}")
    centred = x - x.mean(0)
    _, s, vt = np.linalg.svd(centred, full_matrices=False)
    directions = vt[:k]
    coords = centred @ directions.T                              # (n, k)
    flip = np.sign(coords[np.abs(coords).argmax(0), np.arange(k)])
    return coords * flip, directions * flip[:, None], (s[:k] ** 2) / (s ** 2).sum()


def draw_embedding_space(vectors: torch.Tensor | np.ndarray, labels: Sequence[str],
                         groups: dict[str, Sequence[str]], *, ax=None, title: str | None = None):
    """Tokens as points at their first two principal coordinates, each labelled with its
    token and coloured by its group (tokens in no group are not drawn but still shape the
    directions). vectors: (n, d), one row per label. Returns the Axes."""
    v = as_array(vectors, "vectors")
    if v.ndim != 2 or v.shape[0] != len(labels):
        raise ValueError(f"vectors must be (len(labels), d) = ({len(labels)}, d), got {v.shape}")
    coords, _, explained = pca(v)
    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 5))
    colors = plt.get_cmap("tab10").colors
    where = {label: i for i, label in enumerate(labels)}
    for (name, members), color in zip(groups.items(), colors):
        rows = [where[m] for m in members if m in where]
        ax.scatter(coords[rows, 0], coords[rows, 1], s=14, color=color, label=name, alpha=0.8)
        for r in rows:
            ax.annotate(show_token(labels[r]), coords[r], xytext=(3, 2), textcoords="offset points",
                        fontsize=8, color=color)
    return _finish(ax, explained, title)


def draw_groups(vectors: torch.Tensor | np.ndarray, groups: Sequence[str], *, ax=None,
                title: str | None = None):
    """Many vectors (e.g. one per text) as points at their first two principal coordinates,
    one colour and one marker per group (groups: one name per row; up to 10 groups in
    colours that differ in hue, so that no two groups look alike), no labels, the legend
    beside the points. Returns the Axes."""
    v = as_array(vectors, "vectors")
    if v.ndim != 2 or v.shape[0] != len(groups):
        raise ValueError(f"vectors must be (len(groups), d) = ({len(groups)}, d), got {v.shape}")
    coords, _, explained = pca(v)
    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 5))
    names = list(dict.fromkeys(groups))
    colors = plt.get_cmap("tab10").colors if len(names) <= 10 else head_colors(len(names))
    for k, (name, color) in enumerate(zip(names, colors)):
        rows = [i for i, g in enumerate(groups) if g == name]
        ax.scatter(coords[rows, 0], coords[rows, 1], s=9, color=color, label=name, alpha=0.6,
                   marker=GROUP_MARKERS[k % len(GROUP_MARKERS)], linewidths=0)
    _finish(ax, explained, title)
    ax.legend(fontsize=9, loc="upper left", bbox_to_anchor=(1.01, 1), markerscale=2)
    return ax


def neighbour_agreement(vectors: torch.Tensor | np.ndarray, groups: Sequence[str]
                        ) -> tuple[float, float]:
    """How well the vectors keep their groups apart, in all d dimensions (not the picture's
    two): the share of rows whose nearest other row (cosine similarity) is in the same
    group, and what that share is by chance (sum over groups of (its share)^2, the chance
    that a random other row is in the same group). Returns (agreement, chance)."""
    v = as_array(vectors, "vectors").astype(np.float64)
    if v.ndim != 2 or v.shape[0] != len(groups) or v.shape[0] < 2:
        raise ValueError(f"vectors must be (len(groups), d) with 2 rows or more, got {v.shape}")
    unit = v / np.linalg.norm(v, axis=1, keepdims=True)
    similarity = unit @ unit.T
    np.fill_diagonal(similarity, -np.inf)
    g = np.asarray(groups)
    agreement = float((g[similarity.argmax(1)] == g).mean())
    _, counts = np.unique(g, return_counts=True)
    return agreement, float(((counts / len(g)) ** 2).sum())


def draw_positions_added(embedded: torch.Tensor | np.ndarray, encoding: torch.Tensor | np.ndarray,
                         tokens: Sequence[str], *, ax=None, title: str | None = None):
    """Each token's input at every position, embedded[t] + encoding[p], projected on the
    principal directions of all those sums: one colour per token, a line through its
    positions in order, its position 0 marked with the token.

    embedded: (tokens, d) the scaled embeddings; encoding: (positions, d). Returns the Axes."""
    e, pe = as_array(embedded, "embedded"), as_array(encoding, "encoding")
    if e.ndim != 2 or pe.ndim != 2 or e.shape[1] != pe.shape[1] or len(tokens) != e.shape[0]:
        raise ValueError(f"embedded must be (len(tokens), d) and encoding (positions, d), got "
                         f"{e.shape} and {pe.shape} for {len(tokens)} tokens")
    n_pos = pe.shape[0]
    sums = (e[:, None, :] + pe[None, :, :]).reshape(-1, e.shape[1])  # (tokens * positions, d)
    coords, _, explained = pca(sums)
    coords = coords.reshape(len(tokens), n_pos, 2)
    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 5))
    for t, (token, color) in enumerate(zip(tokens, head_colors(len(tokens)))):
        ax.plot(coords[t, :, 0], coords[t, :, 1], "-o", ms=3, lw=0.8, color=color, alpha=0.8,
                label=f"'{show_token(token)}' at positions 0-{n_pos - 1}")
        ax.annotate(f"{show_token(token)}@0", coords[t, 0], xytext=(4, 4), textcoords="offset points",
                    fontsize=9, fontweight="bold", color=color)
    return _finish(ax, explained, title)


def _finish(ax, explained, title):
    """Axis labels with each direction's share of the spread, the legend, the title."""
    ax.set_xlabel(f"principal direction 1 ({explained[0]:.0%} of the spread)")
    ax.set_ylabel(f"principal direction 2 ({explained[1]:.0%})")
    ax.legend(fontsize=8, loc="best")
    if title:
        ax.set_title(title, fontsize=10)
    return ax
