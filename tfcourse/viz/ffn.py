"""The position-wise feed-forward network from the inside,

    FFN(x) = act(x W_1 + b_1) W_2 + b_2        (paper, eq. 2; act = ReLU, or GELU)

for each token: what it reads (x, d_model numbers), its d_ff hidden activations after the
ReLU/GELU (how many are zero), and the update it adds back to the residual stream, whose norm
is compared with the stream's. The activations come from `record` (hooks on the model), so
they are exactly the model's.
"""

import matplotlib.pyplot as plt
import numpy as np
import torch

from tfcourse.viz.common import as_array, heatmap, show_token


def draw_ffn(call, tokens, *, example=0, title=None):
    """Four panels, one row per token: the input x (tokens x d_model), the hidden activations
    (tokens x d_ff; at the right, the share of units that are inactive, <= 0: exactly the
    zeros of a ReLU), the output FFN(x) (on the input's colour scale), and the norms of the
    update FFN(x) and of the residual stream it is added to.

    call: an FFNCall (tfcourse.viz.record); tokens: the labels of the first len(tokens)
    positions of batch row `example` (padding after them is left out). Returns the Figure.
    """
    n = len(tokens)
    x, h, y, r = (as_array(t[example, :n], name) for t, name in (
        (call.input, "input"), (call.hidden, "hidden"), (call.output, "output"),
        (call.residual, "residual")))
    d_model, d_ff = x.shape[-1], h.shape[-1]
    labels = [show_token(t) for t in tokens]
    fig, axes = plt.subplots(
        1, 4, figsize=(11, 0.24 * n + 1.9), sharey=True, layout="constrained",
        gridspec_kw={"width_ratios": [d_model, d_ff, d_model, 0.7 * d_model]},
    )
    scale = float(max(np.abs(x).max(), np.abs(y).max()))
    panels = [
        (x, f"input x  ({d_model})", "RdBu_r", -scale, scale),
        (h, f"hidden act(x W₁ + b₁)  ({d_ff})", "Purples", 0.0, float(np.quantile(h, 0.99))),
        (y, f"output FFN(x)  ({d_model})", "RdBu_r", -scale, scale),
    ]
    for ax, (m, name, cmap, vmin, vmax) in zip(axes, panels):
        heatmap(m, ax=ax, cmap=cmap, vmin=vmin, vmax=vmax, center=0 if cmap == "RdBu_r" else None,
                    cbar=False, xticklabels=False, yticklabels=labels)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("hidden unit" if m is h else "feature", fontsize=8)
        ax.tick_params(length=0, labelsize=8)
    axes[0].set_yticklabels(labels, rotation=0)
    inactive = (h <= 0).mean(axis=1)
    for i, share in enumerate(inactive):
        axes[1].text(d_ff + 1, i + 0.5, f"{share:.0%}", va="center", fontsize=7, color="0.35")
    axes[1].text(d_ff + 1, -0.3, "≤ 0", fontsize=7, color="0.35")
    for ax, label in zip(axes, ("value", "activation (0 = white)", "value (the input's scale)")):
        bar = fig.colorbar(ax.collections[0], ax=ax, location="bottom", shrink=0.8, aspect=30)
        bar.set_label(label, fontsize=8)
        bar.ax.tick_params(labelsize=7)

    norms = np.linalg.norm(y, axis=-1), np.linalg.norm(r, axis=-1)
    rows = np.arange(n) + 0.5
    axes[3].barh(rows - 0.18, norms[1], height=0.36, color="0.7")
    axes[3].barh(rows + 0.18, norms[0], height=0.36, color="C0")
    axes[3].set_title("‖FFN(x)‖ (blue)\n‖residual‖ (grey)", fontsize=8)
    axes[3].tick_params(labelsize=7)
    axes[3].invert_yaxis()  # as the heatmaps: first token on top
    axes[3].set_ylim(n, 0)
    inactive_mean = float(inactive.mean())
    fig.suptitle(title or f"{call.name}: {d_model} → {d_ff} → {d_model}, "
                 f"{inactive_mean:.0%} of hidden activations ≤ 0, "
                 f"‖FFN(x)‖ / ‖residual‖ = {float((norms[0] / norms[1]).mean()):.2f} on average",
                 fontsize=10)
    return fig


def draw_ffn_weights(w_1, w_2, x, b_1=None, b_2=None, *, activation="relu", title=None):
    """The FFN's weights and what one position does with them, on one shared axis of hidden
    units (column j is unit j everywhere):

    - W_1 (d_model x d_ff) with x beside it: column j is unit j's pattern k_j;
    - the scores z = x W_1 + b_1 (grey bars) and act(z) (coloured): what the activation keeps;
    - W_2 transposed (d_model x d_ff): column j is unit j's output vector v_j, faded where
      act(z_j) = 0 (the unit adds nothing), with FFN(x) = sum_j act(z_j) v_j + b_2 beside it.

    w_1: (d_model, d_ff) as in x @ w_1 (nn.Linear's weight transposed); w_2: (d_ff, d_model);
    x: (d_model,); activation: "relu" or "gelu". Returns the Figure.
    """
    w1, w2, xv = (torch.as_tensor(as_array(t, n)).double()
                  for t, n in ((w_1, "w_1"), (w_2, "w_2"), (x, "x")))
    d_model, d_ff = w1.shape
    if w2.shape != (d_ff, d_model) or xv.shape != (d_model,):
        raise ValueError(f"w_2 must be (d_ff, d_model) = ({d_ff}, {d_model}) and x ({d_model},), "
                         f"got {tuple(w2.shape)} and {tuple(xv.shape)}")
    if activation not in ("relu", "gelu"):
        raise ValueError(f"activation must be 'relu' or 'gelu', got {activation!r}")
    b1, b2 = (torch.zeros(n, dtype=torch.float64) if b is None
              else torch.as_tensor(as_array(b, name)).double()
              for b, n, name in ((b_1, d_ff, "b_1"), (b_2, d_model, "b_2")))
    act = {"relu": "ReLU", "gelu": "GELU"}[activation]
    z = xv @ w1 + b1                                             # (d_ff,) scores
    a = torch.relu(z) if activation == "relu" else torch.nn.functional.gelu(z)
    y = a @ w2 + b2                                              # (d_model,)
    size = min(0.22 * d_ff + 2.8, 14.0), min(0.52 * d_model + 3.6, 10.0)
    fig, axes = plt.subplots(3, 2, figsize=size, layout="constrained",
                             gridspec_kw={"width_ratios": [d_ff, 2.5],
                                          "height_ratios": [d_model, max(6, d_model / 3), d_model]})
    wmax = float(max(w1.abs().max(), w2.abs().max()))
    features = [str(i) for i in range(d_model)]
    rows = ((w1, xv, "W₁: column j = unit j's pattern k_j", "x"),
            (w2.T, y, "W₂ᵀ: column j = unit j's output vector v_j", "FFN(x)"))
    for row, (m, side, name, side_name) in enumerate(rows):
        ax, ax_side = axes[2 * row]
        heatmap(m.numpy(), ax=ax, cmap="RdBu_r", vmin=-wmax, vmax=wmax, center=0, cbar=False,
                xticklabels=list(range(d_ff)), yticklabels=features)
        ax.set_title(name, fontsize=9)
        ax.set_ylabel("feature", fontsize=8)
        smax = float(side.abs().max())
        heatmap(side[:, None].numpy(), ax=ax_side, cmap="RdBu_r", vmin=-smax, vmax=smax, center=0,
                cbar=False, xticklabels=[side_name], yticklabels=False, annot=d_model <= 16,
                fmt=".1f", annot_kws={"fontsize": 7})
        ax_side.set_title(side_name, fontsize=9)
        for a_ in (ax, ax_side):
            a_.tick_params(length=0, labelsize=7)
    off = (a == 0).numpy() if activation == "relu" else (a.abs() < 1e-3 * a.abs().max()).numpy()
    for j in np.flatnonzero(off):
        axes[2, 0].add_patch(plt.Rectangle((j, 0), 1, d_model, color="white", alpha=0.8, lw=0))
    ax = axes[1, 0]
    units = np.arange(d_ff) + 0.5
    ax.bar(units, z.numpy(), width=0.8, color="0.8", label="score z = x W₁ + b₁")
    ax.bar(units, a.numpy(), width=0.45, color="C4", label=f"{act}(z): what unit j passes on")
    ax.axhline(0, color="0.3", lw=0.8)
    ax.set_xlim(0, d_ff)
    ax.set_xticks([])
    ax.set_ylabel("value", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=7, loc="upper right", ncol=2)
    ax.set_title(f"the activation: {int((~off).sum())} of {d_ff} units pass something on; "
                 "the faded columns of W₂ᵀ add nothing" if off.any() else
                 f"the activation: {act} passes every unit on, negative scores made small",
                 fontsize=9)
    axes[1, 1].axis("off")
    axes[2, 0].set_xlabel("hidden unit j", fontsize=8)
    fig.suptitle(title or f"FFN(x) = Σ_j {act}(x·k_j + b₁ⱼ) v_j + b₂, d_model = {d_model}, "
                 f"d_ff = {d_ff}  (red: positive, blue: negative)", fontsize=10)
    return fig


def unit_means(hidden, groups):
    """The mean activation of every hidden unit over the tokens of each group.

    hidden: (n_tokens, d_ff), the hidden activations of many tokens (e.g. an FFNCall's hidden
            at the non-padding positions of a batch, hidden[mask]);
    groups: n_tokens labels (the token itself, or a class such as "digit" or "month name").
    Returns (labels: the groups in order of first appearance, means (n_groups, d_ff)).
    """
    h = torch.as_tensor(as_array(hidden, "hidden"))
    if h.dim() != 2 or h.size(0) != len(groups):
        raise ValueError(f"hidden must have shape (n_tokens={len(groups)}, d_ff), "
                         f"got {tuple(h.shape)}")
    labels = list(dict.fromkeys(groups))
    index = torch.tensor([labels.index(g) for g in groups])
    sums = torch.zeros(len(labels), h.size(1)).index_add_(0, index, h.float())
    counts = torch.bincount(index, minlength=len(labels)).clamp(min=1)
    return labels, sums / counts[:, None]


def selective_units(means, n_units=16):
    """The n_units units whose mean activation differs most between groups (the largest
    group mean minus the mean over groups), ordered by the group they fire most for."""
    m = torch.as_tensor(as_array(means, "means"))
    spread = m.max(0).values - m.mean(0)
    units = spread.topk(min(n_units, m.size(1))).indices
    peak = m[:, units].argmax(0)
    return units[torch.argsort(peak * m.size(1) - spread[units], stable=True)]


def draw_units(means, labels, *, n_units=16, ax=None, title=None, ylabel="tokens"):
    """Which hidden units fire for which tokens: the most selective units (selective_units)
    as columns, the groups as rows (named `labels`, the axis `ylabel`: what the groups are);
    each column scaled by its largest group mean, so 1 is the group the unit fires most for.
    Returns the Axes."""
    m = torch.as_tensor(as_array(means, "means"))
    units = selective_units(m, n_units)
    table = m[:, units] / m[:, units].max(0).values.clamp(min=1e-8)
    if ax is None:
        _, ax = plt.subplots(figsize=(0.34 * len(units) + 2.2, 0.3 * len(labels) + 1.2))
    heatmap(table.numpy(), ax=ax, cmap="rocket_r", vmin=0, vmax=1,
                xticklabels=[str(u) for u in units.tolist()],
                yticklabels=[show_token(g) for g in labels],
                cbar_kws={"label": "mean activation / the unit's largest"})
    ax.set_xlabel("hidden unit", fontsize=9)
    ax.set_ylabel(ylabel, fontsize=9)
    ax.tick_params(length=0, labelsize=8)
    ax.set_yticklabels(ax.get_yticklabels(), rotation=0)
    if title:
        ax.set_title(title, fontsize=10)
    return ax
