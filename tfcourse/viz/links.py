"""Attention drawn as links: a line from each query token to each key token it reads, whose
width and opacity grow with the attention weight.

Self-attention puts the queries in a column on the left and the keys in a column on the
right; cross-attention puts the keys (the source) in a row above the queries (the target).
A weight of exactly 0 or one below `threshold` gets no line: the picture shows where the
weight goes, not a haze of near-zero lines. A masked pair (a future or padded key) is a
different thing, a pair the query may not read: it gets a faint dotted grey line, so a
masked pair never looks like a small weight. Every weight line that is drawn can be seen: a
small weight still gets MIN_WIDTH and MIN_ALPHA, a faint thin line. A key under the picture
names the heads' colours, the widths of weights 0.1, 0.5 and 1, and both kinds of absence.
With several heads in one panel the lines are drawn lightest first, whatever their head, so
a heavy line of head 0 is not buried under the haze of head 3; each head has its own lane
(its lines shifted a little from the next head's) and opaque colours (a light line is its
colour mixed with white, not a transparent one), so overlaid heads never blend into brown.
"""

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.collections import LineCollection
from matplotlib.colors import to_rgb
from matplotlib.lines import Line2D

from tfcourse.viz.common import as_array, head_colors, show_token

MAX_WIDTH = 6.0  # points, for a weight of 1
MIN_WIDTH = 0.6  # points, for a weight just above 0: thin, but visible
MIN_ALPHA = 0.25  # opacity for a weight just above 0
GREY = (0.62, 0.62, 0.62)
MASKED_STYLE = dict(colors=[(0.55, 0.55, 0.55, 0.45)], linewidths=0.7, linestyles=(0, (1, 2.5)))
KEY_WEIGHTS = (0.1, 0.5, 1.0)  # the widths the key shows
LONG = 12  # tokens: from here on, heads overlaid in one panel tangle; draw_heads drops the overlay
BANDS = 4  # weight bands drawn in order, lightest first, when several heads share a panel
LANE = 0.15  # between two heads' lines in one panel, in token spacings


def draw_links(weights, queries, keys=None, *, ax=None, cross=False, token=None, mask=None,
               threshold=0.02, colors=None, max_width=MAX_WIDTH, title=None, key=True):
    """Draw attention weights as links between tokens.

    weights: (q_len, k_len) for one head, or (heads, q_len, k_len): the heads overlaid, one
             colour each (the "all heads" view). A tensor or an array.
    queries: q_len token labels; keys: k_len labels (default: the queries, self-attention).
    cross:   keys (the source) in a row above the queries (the target), instead of columns.
    token:   index of a query whose links stand out, in colour; the others turn grey.
    mask:    bool, broadcastable to (q_len, k_len), True = may attend: a masked pair gets a
             faint dotted grey line (gid "masked") whatever its weight. Pairs whose weight is 0
             or below `threshold` get none (threshold=0 draws every pair of nonzero weight).
    colors:  one colour per head (default: head_colors).
    key:     a key under the panel: the heads' colours (several heads), line widths, the
             masked pairs' dots and the threshold.

    A line's width is MIN_WIDTH + (max_width - MIN_WIDTH) * weight (points), its opacity
    MIN_ALPHA + (1 - MIN_ALPHA) * weight: both grow with the weight from a visible minimum.
    Returns the Axes (a new figure's when ax is None).
    """
    w = as_array(weights, "weights")
    if w.ndim == 2:
        w = w[None]
    if w.ndim != 3:
        raise ValueError(f"weights must have shape (q_len, k_len) or (heads, q_len, k_len), "
                         f"got {w.shape}")
    heads, q_len, k_len = w.shape
    keys = queries if keys is None else keys
    for name, labels, n in (("queries", queries, q_len), ("keys", keys, k_len)):
        if len(labels) != n:
            raise ValueError(f"{name} must have {n} labels (weights have shape {w.shape}), "
                             f"got {len(labels)}")
    allowed = np.ones((q_len, k_len), dtype=bool)
    if mask is not None:
        allowed = np.broadcast_to(as_array(mask, "mask").astype(bool), (q_len, k_len))
    if token is not None and not 0 <= token < q_len:
        raise ValueError(f"token must be a query position in [0, {q_len}), got {token}")
    colors = head_colors(heads) if colors is None else colors
    if len(colors) < heads:
        raise ValueError(f"colors must have one colour per head ({heads}), got {len(colors)}")
    if ax is None:
        _, ax = plt.subplots(figsize=links_figsize(q_len, k_len, cross))

    q_pos, k_pos = _positions(q_len, k_len, cross)
    masked = [(i, j) for i in range(q_len) for j in range(k_len) if not allowed[i, j]]
    if masked:
        ax.add_collection(LineCollection([(q_pos[i], k_pos[j]) for i, j in masked], gid="masked",
                                         zorder=0.5, **MASKED_STYLE))
    band = np.minimum((w * BANDS).astype(int), BANDS - 1) if heads > 1 else np.zeros(w.shape, int)
    for h in range(heads):
        ends = _lanes(q_pos, k_pos, h, heads, cross)
        for part in ("others", "highlighted"):
            rows = [i for i in range(q_len) if (i == token) == (part == "highlighted")]
            grey = token is not None and part == "others"
            for b in np.unique(band[h]):
                pairs = [(i, j) for i in rows for j in range(k_len) if allowed[i, j]
                         and w[h, i, j] > 0 and w[h, i, j] >= threshold and band[h, i, j] == b]
                ax.add_collection(LineCollection(
                    [(ends[0][i], ends[1][j]) for i, j in pairs],
                    linewidths=[link_width(w[h, i, j], max_width) for i, j in pairs],
                    colors=[_link_color(GREY if grey else colors[h], link_alpha(w[h, i, j])
                                        * (0.35 if grey else 1.0), opaque=heads > 1)
                            for i, j in pairs],
                    capstyle="round", zorder=1 + b + (BANDS if part == "highlighted" else 0),
                    gid=f"head {h}" + (" highlighted" if part == "highlighted" else ""),
                ))

    _label(ax, queries, q_pos, "query", cross, token)
    _label(ax, keys, k_pos, "key", cross, None)
    _frame(ax, q_pos, k_pos, cross)
    if title:
        ax.set_title(title, fontsize=10)
    if key:
        columns = link_key(colors[:heads] if heads > 1 else None, threshold, bool(masked),
                           colors[0] if heads == 1 else "0.3", max_width, columns=True)
        rows = max(len(c) for c in columns)
        blank = Line2D([], [], color="none", label=" ")
        ax.legend(handles=[h for c in columns for h in c + [blank] * (rows - len(c))],
                  loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=len(columns), fontsize=7,
                  frameon=False, handlelength=2.2, columnspacing=1.0)
    return ax


def link_key(head_colors_=None, threshold=0.02, masked=True, color="0.3", max_width=MAX_WIDTH,
             columns=False):
    """Legend handles: one per head colour (when given), the width of weights 0.1, 0.5 and 1,
    the masked pairs' dotted line (when any), and what a missing line means. columns=True:
    those three groups as three lists (the non-empty ones), else one list."""
    heads = [Line2D([], [], color=c, lw=4, label=f"head {h}") for h, c in enumerate(head_colors_ or [])]
    widths = [Line2D([], [], color=color, alpha=link_alpha(v), lw=link_width(v, max_width),
                     solid_capstyle="round", label=f"weight {v:g}") for v in KEY_WEIGHTS]
    absent = []
    if masked:
        absent.append(Line2D([], [], color=MASKED_STYLE["colors"][0], lw=1.2, ls=(0, (1, 2)),
                             label="masked pair"))
    if threshold > 0:
        absent.append(Line2D([], [], color="none", label=f"no line: < {threshold:g}"))
    groups = [g for g in (heads, widths, absent) if g]
    return groups if columns else [h for g in groups for h in g]


def draw_heads(weights, queries, keys=None, *, cross=False, token=None, mask=None,
               threshold=0.02, title=None, overlay=None):
    """One panel of links per head, side by side (stacked for cross-attention), each in its
    colour, and (overlay=True) an "all heads" panel with every head at once. By default
    (overlay=None) the overlay is drawn for sequences shorter than LONG tokens only: on longer
    ones the heads' lines tangle into one haze. One key for the figure, under the panels.

    weights: (heads, q_len, k_len). Other arguments as in draw_links. Returns the Figure.
    """
    w = as_array(weights, "weights")
    if w.ndim != 3:
        raise ValueError(f"weights must have shape (heads, q_len, k_len), got {w.shape}")
    heads, q_len, k_len = w.shape
    if overlay is None:
        overlay = max(q_len, k_len) < LONG
    panels = heads + (1 if overlay and heads > 1 else 0)
    width, height = links_figsize(q_len, k_len, cross)
    if cross:
        fig, axes = plt.subplots(panels, 1, figsize=(width, height * panels), squeeze=False)
    else:
        fig, axes = plt.subplots(1, panels, figsize=(width * panels, height), squeeze=False)
    colors = head_colors(heads)
    for h, ax in enumerate(axes.flat[:heads]):
        draw_links(w[h], queries, keys, ax=ax, cross=cross, token=token, mask=mask,
                   threshold=threshold, colors=[colors[h]], title=f"head {h}", key=False)
        ax.title.set_color(colors[h])
    if panels > heads:
        draw_links(w, queries, keys, ax=axes.flat[-1], cross=cross, token=token, mask=mask,
                   threshold=threshold, colors=colors, title="all heads", key=False)
    masked = mask is not None and not np.broadcast_to(as_array(mask, "mask"), (q_len, k_len)).all()
    handles = link_key(colors, threshold, masked)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0),
               ncol=len(handles), fontsize=8, frameon=False, handlelength=2.2)
    return fig


def _lanes(q_pos, k_pos, h, heads, cross):
    """Head h's line ends when `heads` heads share a panel: each head its own lane, shifted
    by LANE from the next one along the tokens' column (row, for cross-attention), so
    two heads' lines between the same tokens lie side by side instead of on top of each
    other (where their colours would mix into one brown)."""
    shift = (h - (heads - 1) / 2) * LANE
    move = (lambda x, y: (x + shift, y)) if cross else (lambda x, y: (x, y + shift))
    return [move(*p) for p in q_pos], [move(*p) for p in k_pos]


def _link_color(color, alpha, opaque):
    """A line's RGBA: the colour at opacity `alpha`, or (opaque) the same colour mixed with
    the white page by `alpha` and fully opaque: lines drawn over each other then keep their
    own colour instead of blending (the overlay of several heads)."""
    rgb = np.array(to_rgb(color))
    return (*(1 - alpha * (1 - rgb)), 1.0) if opaque else (*rgb, alpha)


def link_width(weight, max_width=MAX_WIDTH):
    """The width (points) of a link of attention weight `weight` in (0, 1]."""
    return MIN_WIDTH + (max_width - MIN_WIDTH) * float(weight)


def link_alpha(weight):
    """The opacity of a link of attention weight `weight` in (0, 1]."""
    return MIN_ALPHA + (1.0 - MIN_ALPHA) * float(weight)


def links_figsize(q_len, k_len, cross):
    """A size (inches) in which every token label has room."""
    if cross:
        return max(4.0, 0.32 * max(q_len, k_len) + 1.6), 2.6
    return 2.6, max(2.0, 0.26 * max(q_len, k_len) + 0.6)


def _positions(q_len, k_len, cross):
    """Where each query and key token sits: (x, y) per token."""
    if not cross:
        return [(0.0, -float(i)) for i in range(q_len)], [(1.0, -float(j)) for j in range(k_len)]
    span = max(q_len, k_len) - 1

    def row(n, y):
        if n == 1:
            return [(span / 2, y)]
        return [(span * i / (n - 1), y) for i in range(n)]

    return row(q_len, 0.0), row(k_len, 1.0)


def _label(ax, tokens, positions, role, cross, token):
    """Each token as an annotation whose xy is exactly its lines' end."""
    if cross:
        offset, ha, va = ((0, 5), "center", "bottom") if role == "key" else ((0, -5), "center", "top")
    else:
        offset, ha, va = ((-5, 0), "right", "center") if role == "query" else ((5, 0), "left", "center")
    for i, (label, xy) in enumerate(zip(tokens, positions)):
        chosen = i == token
        ax.annotate(show_token(label), xy=xy, xytext=offset, textcoords="offset points", ha=ha,
                    va=va, fontsize=9, fontweight="bold" if chosen else "normal",
                    bbox=dict(boxstyle="round,pad=0.15", fc="#ffe08a", ec="none") if chosen else None,
                    gid=f"{role} {i}")


def _frame(ax, q_pos, k_pos, cross):
    xs = [x for x, _ in q_pos + k_pos]
    ys = [y for _, y in q_pos + k_pos]
    if cross:
        ax.set_xlim(min(xs) - 0.8, max(xs) + 0.8)
        ax.set_ylim(-0.55, 1.55)
        ax.text(min(xs) - 0.9, 1.0, "keys\n(source)", ha="right", va="center", fontsize=8,
                color="0.4")
        ax.text(min(xs) - 0.9, 0.0, "queries\n(target)", ha="right", va="center", fontsize=8,
                color="0.4")
    else:
        ax.set_xlim(-0.45, 1.45)
        ax.set_ylim(min(ys) - 0.7, 1.1)
        ax.text(0.0, 0.75, "query", ha="right", va="bottom", fontsize=8, color="0.4")
        ax.text(1.0, 0.75, "key", ha="left", va="bottom", fontsize=8, color="0.4")
    ax.axis("off")
