"""Attention of a whole model, one layer and head at a time: static figures, and an
interactive explorer (ipywidgets) to choose the layer, the head, a token, the example, or to
type one's own input.

The explorer shows its figure as an ordinary image output that each change redraws in place
(IPython's update_display), so a saved notebook keeps the last figure: it shows without a
kernel, and nothing is fetched from the network. Only the row of controls is a widget.
"""

import html
import io
import re
from dataclasses import dataclass

import matplotlib.pyplot as plt
import torch

from tfcourse.decoding import greedy_decode
from tfcourse.inference import NOT_SURE, output_confidence
from tfcourse.masks import padding_mask, target_mask
from tfcourse.viz.common import as_array, head_colors
from tfcourse.viz.heatmaps import draw_heatmap
from tfcourse.viz.links import LONG, draw_links, link_key, links_figsize
from tfcourse.viz.record import record
from tfcourse.vocab import BOS, EOS, UNK

NONE = -1  # the controls' value for "all heads" and "no token" (a widget's None means "no choice")
KIND_NAMES = {"self": "self-attention", "masked self": "masked self-attention",
              "cross": "cross-attention"}


@dataclass
class AttentionMap:
    """One attention module's weights for one example, with the tokens to label them.

    label: e.g. "decoder layer 1 · cross-attention"; kind: "self", "masked self" or "cross".
    weights: (heads, q_len, k_len); queries: q_len labels; keys: k_len labels.
    mask: bool (q_len, k_len), True = may attend, or None.
    """

    label: str
    kind: str
    weights: torch.Tensor
    queries: list
    keys: list
    mask: torch.Tensor | None = None


def layer_label(name, kind):
    """"decoder.layers.1.cross_attn", "cross" -> "decoder layer 1 · cross-attention"."""
    stack = name.split(".")[0] if "." in name else ""
    stack = "" if stack == "layers" else stack  # a decoder-only model's "layers.0.attn"
    layer = re.search(r"(?:^|\.)(\d+)(?:\.|$)", name)
    where = " ".join(p for p in (stack, f"layer {layer.group(1)}" if layer else "") if p)
    return f"{where or name} · {KIND_NAMES[kind]}"


@torch.no_grad()
def seq2seq_attention(model, vocab, text, max_len=32):
    """What an encoder-decoder Transformer (tfcourse.model.Transformer, or a learner's with
    the same forward(src, tgt, src_mask, tgt_mask)) looks at while it turns `text` into its
    greedy output: every attention layer's weights, teacher-forced on that output.

    vocab: a tfcourse.data.Vocab. Returns (the output text, [AttentionMap, ...]) in the order
    the model calls its attention modules (encoder layers, then each decoder layer's masked
    self-attention and cross-attention). Decoder queries are labelled with the token each
    position writes; the decoder's own keys with the token it was given (BOS, then the output).
    """
    if not text:
        raise ValueError("text is empty: type something for the model to read")
    pad = model.config.pad_id
    device = next(model.parameters()).device
    src = torch.tensor([vocab.encode(text)], device=device)
    src_mask = padding_mask(src, pad)
    out = greedy_decode(model, src, src_mask, max_len, BOS, EOS)[0]
    out = out[: int((out != pad).sum())]  # the tokens written, EOS included if it came
    tgt = torch.cat([torch.tensor([BOS], device=device), out[:-1]])[None]
    with record(model) as rec:
        model(src, tgt, src_mask, target_mask(tgt, pad))

    def labels(ids):
        return ["⏎" if i == EOS else "?" if i == UNK else "BOS" if i == BOS else vocab.itos[i]
                for i in ids.tolist()]

    source, written, given = labels(src[0]), labels(out), labels(tgt[0])
    maps = []
    for call in rec.attention:
        queries, keys = (source, source) if call.name.startswith("encoder") else (
            (written, source) if call.kind == "cross" else (written, given))
        mask = None if call.mask is None else call.mask[0, 0].cpu()  # the same for every head
        maps.append(AttentionMap(layer_label(call.name, call.kind), call.kind,
                                 call.weights[0].cpu(), queries, keys, mask))
    return vocab.decode(out), maps


def attention_figsize(amap: AttentionMap, head: int | None = None) -> tuple[float, float]:
    """The size (inches) draw_attention gives `amap`'s figure for `head`: links and heatmap
    side by side (self-attention) or stacked (cross-attention)."""
    (lw, lh), (hw, hh) = _panel_sizes(amap, head)
    return (max(lw, hw), lh + hh) if amap.kind == "cross" else (lw + hw, max(lh, hh))


def _grid(amap, head):
    """The links' panels as (rows, columns): one panel, or one per head (all heads of a
    sequence of LONG tokens or more: overlaid, they tangle): in a row beside each other for
    self-attention, two to a row for cross-attention (each is wide)."""
    heads, q_len, k_len = amap.weights.shape
    if head is not None or heads == 1 or max(q_len, k_len) < LONG:
        return 1, 1
    return ((heads + 1) // 2, min(heads, 2)) if amap.kind == "cross" else (1, heads)


def _panel_sizes(amap, head=None):
    """The links' (all their panels') and the heatmap's (width, height) in inches."""
    q_len, k_len = amap.weights.shape[1:]
    rows, cols = _grid(amap, head)
    lw, lh = links_figsize(q_len, k_len, amap.kind == "cross")
    return (lw * cols, lh * rows), (0.3 * k_len + 1.8, 0.28 * q_len + 1.2)


def draw_attention(amap, head=None, token=None, *, title=None, canvas=None):
    """One attention module for one example: the links (head `head`; when None every head,
    overlaid, or one panel per head once the sequence has LONG tokens or more) and the
    weights as a heatmap (that head's, or the mean of the heads).
    token: a query position to highlight. canvas: a figure size (inches) at least
    attention_figsize(amap, head), the drawing at its top, centred (the explorer's figure
    keeps one size from layer to layer). Returns the Figure."""
    w = as_array(amap.weights, "weights")
    heads = w.shape[0]
    if head is not None and not 0 <= head < heads:
        raise ValueError(f"head must be None (all) or in [0, {heads}), got {head}")
    cross = amap.kind == "cross"
    k_len = w.shape[2]
    (lw, lh), (hw, hh) = _panel_sizes(amap, head)
    width, height = attention_figsize(amap, head)
    canvas = canvas or (width, height)
    fig = plt.figure(figsize=canvas)
    if cross:
        outer = fig.add_gridspec(2, 1, height_ratios=[lh, hh])
    else:
        outer = fig.add_gridspec(1, 2, width_ratios=[lw, hw])
    rows, cols = _grid(amap, head)
    inner = outer[0].subgridspec(rows, cols)
    colors = head_colors(heads)
    if rows * cols == 1:
        which = "all heads" if head is None else f"head {head}"
        draw_links(w if head is None else w[head], amap.queries, amap.keys,
                   ax=fig.add_subplot(inner[0, 0]), cross=cross, token=token, mask=amap.mask,
                   colors=colors if head is None else [colors[head]], title=f"{which}: links")
    else:  # one panel per head, one key under them
        panels = [fig.add_subplot(inner[h // cols, h % cols]) for h in range(heads)]
        for h, ax in enumerate(panels):
            draw_links(w[h], amap.queries, amap.keys, ax=ax, cross=cross, token=token,
                       mask=amap.mask, colors=[colors[h]], title=f"head {h}", key=False)
            ax.title.set_color(colors[h])
        masked = amap.mask is not None and not bool(amap.mask.all())
        handles = link_key(colors, masked=masked)
        panels[-cols].legend(handles=handles, loc="upper left", bbox_to_anchor=(0.0, 0.0),
                           ncol=len(handles), fontsize=7, frameon=False, handlelength=2.2)
    ax_map = fig.add_subplot(outer[1])
    draw_heatmap(w.mean(0) if head is None else w[head], amap.queries, amap.keys, ax=ax_map,
                 vmin=0, vmax=1, title="mean of the heads" if head is None else f"head {head}",
                 xlabel="key", ylabel="query")
    if token is not None:
        ax_map.add_patch(plt.Rectangle((0, token), k_len, 1, fill=False, ec="#d62728", lw=1.5))
    fig.suptitle(title or amap.label, fontsize=11)
    x, y = width / canvas[0], height / canvas[1]  # the drawing's share of the canvas
    fig.tight_layout(rect=((1 - x) / 2, 1 - y, (1 + x) / 2, 1))
    return fig


def png(fig, dpi=80, tight=True):
    """A figure as PNG bytes (tight: cropped to what is drawn, else the figure's own size);
    the figure is closed (so it is not shown a second time)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight" if tight else None)
    plt.close(fig)
    return buffer.getvalue()


class AttentionExplorer:
    """Choose an example (or type your own), the attention layer, the head and a token; the
    figure below the controls is redrawn for each choice.

        explorer = AttentionExplorer.seq2seq(model, vocab, ["November 21, 2026", ...])
        explorer  # the last line of a cell: shows the controls and the figure

    attend: a function text -> (the model's output text, [AttentionMap, ...]), e.g.
    seq2seq_attention with the model given; unknown: a function text -> the characters of
    it the model does not know (their tokens are labelled "?"; the figure's title and the
    controls say which). The figure is an image output that stays in a saved notebook, the
    same size for every layer of an example; the controls need a running kernel.
    """

    MAX_CHARS = 40  # a longer input's links are too close together to read

    def __init__(self, attend, examples, *, layer=0, head=None, token=None, unknown=None):
        if not examples:
            raise ValueError("examples must name at least one input text")
        self.attend, self.unknown = attend, unknown
        self.examples = list(examples)
        self.layer, self.head, self.token = layer, head, token
        self._read(self.examples[0])
        self._check(layer, head, token)
        self._handle = self._controls = None

    @classmethod
    def seq2seq(cls, model, vocab, examples, max_len=32, **choices):
        """An explorer of an encoder-decoder model that reads texts with `vocab`; the title
        gives the output's confidence as `tfcourse decode` does (the weakest character's
        probability, inference.output_confidence, "not sure" under NOT_SURE["seq2seq"])."""

        def attend(text):
            output, maps = seq2seq_attention(model, vocab, text, max_len)
            sure, = output_confidence(model, [(text, output)], vocab)
            doubt = ", not sure" if sure < NOT_SURE["seq2seq"] else ""
            return f"{output}  (weakest character {sure:.0%}{doubt})", maps

        return cls(attend, examples,
                   unknown=lambda text: [c for c in dict.fromkeys(text) if c not in vocab.stoi],
                   **choices)

    @property
    def notice(self) -> str:
        """What the figure does not show as typed: "" or e.g. "'é' is unknown to the model: ?"."""
        unknown = self.unknown(self.example) if self.unknown else []
        if not unknown:
            return ""
        verb = "is" if len(unknown) == 1 else "are"
        return f"{', '.join(map(repr, unknown))} {verb} unknown to the model: ?"

    def figure(self):
        """The current choice as a Figure."""
        amap = self.maps[self.layer]
        title = f"{self.example!r} → {self.output}:  {amap.label}"
        return draw_attention(amap, self.head, self.token, canvas=self._canvas,
                              title=f"{title}\n({self.notice})" if self.notice else title)

    def _read(self, example):
        """The model's output and attention for `example` (raises before anything changes)."""
        if len(example) > self.MAX_CHARS:
            raise ValueError(f"example has {len(example)} characters; the explorer draws inputs "
                             f"of up to {self.MAX_CHARS} (a longer one's links are too close to read)")
        output, maps = self.attend(example)
        self.example, self.output, self.maps = example, output, maps
        sizes = [attention_figsize(m) for m in maps]  # one size for every layer: no page jump
        self._canvas = (max(w for w, _ in sizes), max(h for _, h in sizes))

    def select(self, *, example=None, layer=None, head="keep", token="keep"):
        """Change the choice (as the controls do); a new example keeps the layer and head."""
        if example is not None and example != self.example:
            self._read(example)
            if example not in self.examples:
                self.examples.append(example)
            self.layer, self.token = min(self.layer, len(self.maps) - 1), None
        layer = self.layer if layer is None else layer
        head = self.head if head == "keep" else head
        if token == "keep":  # another layer may have other queries: keep no token there
            token = self.token if layer == self.layer else None
        self._check(layer, head, token)
        self.layer, self.head, self.token = layer, head, token
        if self._controls is not None:
            self._sync_controls()
        if self._handle is not None:
            self._handle.update(self._image())

    def _check(self, layer, head, token):
        if not 0 <= layer < len(self.maps):
            raise ValueError(f"layer must be in [0, {len(self.maps)}), got {layer}")
        heads, q_len = self.maps[layer].weights.shape[:2]
        if head is not None and not 0 <= head < heads:
            raise ValueError(f"head must be None (all heads) or in [0, {heads}), got {head}")
        if token is not None and not 0 <= token < q_len:
            raise ValueError(f"token must be None or a query position in [0, {q_len}), got {token}")

    def _image(self):
        from IPython.display import Image

        return Image(data=png(self.figure(), tight=False))

    def _ipython_display_(self):
        from IPython.display import display

        try:
            self._controls = self._make_controls()
        except ImportError:  # tfcourse installed without its [lab] extra: the figure alone
            print("(pip install ipywidgets for the explorer's controls; select(...) works without)")
        else:
            bundle = self._controls._repr_mimebundle_()
            bundle["text/plain"] = ("[Attention explorer: choose the example, the layer, the head "
                                    "and a token, or type your own input, once this cell has run]")
            display(bundle, raw=True)
        self._handle = display(self._image(), display_id=True)

    def _make_controls(self):
        import ipywidgets as w

        style = {"description_width": "initial"}
        fit = w.Layout(width="max-content")
        self._widgets = c = {
            "example": w.Dropdown(description="example", style=style),
            "text": w.Text(placeholder="or type your own and press Enter", continuous_update=False,
                           layout=w.Layout(width="18em")),
            # as wide as their longest label, and in line with the others
            "layer": w.Dropdown(description="attention", style=style, layout=fit),
            "head": w.ToggleButtons(style={"button_width": "3.2em"}, layout=fit),
            "token": w.Dropdown(description="token", style=style, layout=w.Layout(width="11em")),
            "status": w.HTML(),
        }
        # a label of its own: ToggleButtons' description sits above the middle of its buttons
        head_label = w.Label("head", layout=w.Layout(width="auto", margin="0 0 0 1em"))
        self._sync_controls()

        def on(name, action):
            def handler(change):
                if self._syncing:
                    return
                try:
                    action(change["new"])  # select's _sync_controls sets the status
                except Exception as error:  # a learner's text the model cannot read
                    c["status"].value = (f"<span style='color:#b00'>{type(error).__name__}: "
                                         f"{html.escape(str(error))}</span>")
            c[name].observe(handler, "value")

        on("example", lambda v: self.select(example=v))
        on("text", lambda v: v and self.select(example=v))
        on("layer", lambda v: self.select(layer=v))
        on("head", lambda v: self.select(head=None if v == NONE else v))
        on("token", lambda v: self.select(token=None if v == NONE else v))
        return w.VBox([w.HBox([c["example"], c["text"]]),
                       w.HBox([c["layer"], head_label, c["head"], c["token"]],
                              layout=w.Layout(align_items="center")),
                       c["status"]])

    _syncing = False

    def _sync_controls(self):
        """Show the current choice in the controls without triggering their handlers."""
        c = self._widgets
        amap = self.maps[self.layer]
        self._syncing = True
        try:
            c["example"].options = self.examples
            c["example"].value = self.example
            c["layer"].options = [(m.label, i) for i, m in enumerate(self.maps)]
            c["layer"].value = self.layer
            c["head"].options = [("all", NONE)] + [(str(h), h) for h in range(amap.weights.size(0))]
            c["head"].value = NONE if self.head is None else self.head
            c["token"].options = [("none", NONE)] + [
                (f"{i}: {q}", i) for i, q in enumerate(amap.queries)]
            c["token"].value = NONE if self.token is None else self.token
            c["status"].value = self.notice and f"<span style='color:#a60'>{html.escape(self.notice)}</span>"
        finally:
            self._syncing = False
