"""One token's journey through an encoder: at each layer, which positions its query reads
(every head), what attention and the feed-forward network add to its vector, and how far the
vector has moved from where it started.

Each sublayer does x <- LayerNorm(x + Sublayer(x)) (post-norm) or x <- x + Sublayer(LayerNorm(x))
(pre-norm): the update is Sublayer(...), the residual stream is x. Read with forward hooks
on the encoder's layers (`self_attn`, `feed_forward`, `sublayers`: tfcourse's EncoderLayer).
"""

from collections.abc import Sequence
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import torch

from tfcourse.viz.common import heatmap, show_token
from tfcourse.viz.record import record


@dataclass
class Journey:
    """One position's path through the encoder's layers.

    streams:  (2 * n_layers + 1, d_model) its vector: the input, then after each sublayer
    updates:  (2 * n_layers, d_model) what each sublayer computed for it (attention's output,
              the FFN's output) before the residual sum
    reads:    (n_layers, heads, seq) its query's attention weights, layer by layer
    active:   (n_layers,) how many of the FFN's hidden units it switches on (> 0)
    d_ff:     the FFN's number of hidden units
    """

    streams: torch.Tensor
    updates: torch.Tensor
    reads: torch.Tensor
    active: list[int]
    d_ff: int


def follow(encoder: torch.nn.Module, x: torch.Tensor, position: int,
           mask: torch.Tensor | None = None) -> Journey:
    """Run `encoder` on x (1, seq, d_model) and keep what happens at `position`."""
    if x.dim() != 3 or x.size(0) != 1:
        raise ValueError(f"x must be one sequence, shape (1, seq, d_model), got {tuple(x.shape)}")
    if not 0 <= position < x.size(1):
        raise ValueError(f"position must be in [0, {x.size(1)}), got {position}")
    streams, updates, hooks = [x[0, position]], [], []
    for layer in encoder.layers:
        for sub, part in zip(layer.sublayers, (layer.self_attn, layer.feed_forward)):
            hooks.append(part.register_forward_hook(
                lambda m, i, out: updates.append((out[0] if isinstance(out, tuple) else out)[0, position])))
            hooks.append(sub.register_forward_hook(lambda m, i, out: streams.append(out[0, position])))
    try:
        with torch.no_grad(), record(encoder) as rec:
            encoder(x, mask)
    finally:
        for hook in hooks:
            hook.remove()
    return Journey(
        streams=torch.stack(streams).detach(), updates=torch.stack(updates).detach(),
        reads=torch.stack([call.weights[0, :, position] for call in rec.attention]),
        active=[int((call.hidden[0, position] > 0).sum()) for call in rec.ffn],
        d_ff=rec.ffn[0].hidden.size(-1),
    )


def draw_journey(journey: Journey, tokens: Sequence[str], position: int, *, title: str | None = None):
    """Left, one heatmap per layer: the token's query's weights over the keys, one row per
    head. Right: the size of the stream after each step (line) and of each sublayer's update
    (bars, with the FFN's share of units on), and the cosine similarity of the stream with
    the token's input. Returns the Figure."""
    n_layers, heads, seq = journey.reads.shape
    if len(tokens) != seq:
        raise ValueError(f"tokens must have {seq} labels, got {len(tokens)}")
    fig = plt.figure(figsize=(max(7.0, 0.3 * seq + 2.5) + 5.5, 1.1 * heads * n_layers / 2 + 2.8),
                     layout="constrained")
    left, right = fig.subfigures(1, 2, width_ratios=[max(7.0, 0.3 * seq + 2.5), 5.5])
    axes = left.subplots(n_layers, 1, squeeze=False)[:, 0]
    labels = [show_token(t) for t in tokens]
    for layer, ax in enumerate(axes):
        heatmap(journey.reads[layer].numpy(), ax=ax, cmap="Blues", vmin=0, vmax=1,
                xticklabels=labels, yticklabels=[f"head {h}" for h in range(heads)],
                cbar_kws={"label": "weight", "shrink": 0.8})
        ax.set_title(f"layer {layer}: what '{labels[position]}' reads", fontsize=9)
        ax.tick_params(length=0, labelsize=8)
        ax.set_yticklabels(ax.get_yticklabels(), rotation=0)
        ax.get_xticklabels()[position].set_fontweight("bold")
        ax.get_xticklabels()[position].set_color("#d62728")
    ax_norm, ax_cos = right.subplots(2, 1, sharex=True)
    steps = ["input"] + [f"L{k} {part}" for k in range(n_layers) for part in ("attention", "FFN")]
    stream_norms = journey.streams.norm(dim=-1).numpy()
    update_norms = journey.updates.norm(dim=-1).numpy()
    ax_norm.bar(np.arange(1, len(steps)), update_norms, color=["C0", "C1"] * n_layers, alpha=0.7,
                label="‖update‖ (blue: attention, orange: FFN)")
    for k, active in enumerate(journey.active):
        ax_norm.text(2 + 2 * k, update_norms[1 + 2 * k] / 2, f"{active}/{journey.d_ff}\nunits on",
                     ha="center", va="center", fontsize=7)
    ax_norm.plot(range(len(steps)), stream_norms, "ko-", ms=4, label="‖stream‖ after the step")
    ax_norm.set_ylabel("norm", fontsize=8)
    ax_norm.set_ylim(0, 1.5 * max(stream_norms.max(), update_norms.max()))
    ax_norm.legend(fontsize=7, loc="upper right")
    cos = torch.cosine_similarity(journey.streams, journey.streams[:1], dim=-1).numpy()
    ax_cos.plot(range(len(steps)), cos, "o-", color="C2")
    ax_cos.set_ylim(min(0.0, cos.min() - 0.05), 1.05)
    ax_cos.set_ylabel("cosine with the input", fontsize=8)
    ax_cos.set_xticks(range(len(steps)), steps, rotation=30, ha="right", fontsize=8)
    for ax in (ax_norm, ax_cos):
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
    fig.suptitle(title or f"the journey of '{labels[position]}' (position {position})", fontsize=10)
    return fig
