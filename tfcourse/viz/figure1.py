"""The Transformer in the layout of the paper's figure 1, drawn by code, each part labelled
with the chapter of the course that builds it; `you_are_here(n)` highlights chapter n's parts.
"""

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Circle, FancyBboxPatch

CHAPTERS = {
    1: "scaled dot-product attention", 2: "multi-head attention", 3: "positional encoding",
    4: "feed-forward and normalization", 5: "the encoder", 6: "the decoder", 7: "training",
    8: "decoding", 9: "encoder-only and decoder-only variants", 10: "efficiency and scale",
    11: "tokens", 12: "the modern block", 13: "a small language model",
}
COLORS = {"embedding": "#f9d3d0", "attention": "#fbe2c2", "norm": "#f3f1b8",
          "ffn": "#cde6f6", "linear": "#ddd5f0", "softmax": "#d3ecd0", "frame": "#f2f2f2"}
HIGHLIGHT = "#d62728"
DIM_FACE, DIM_EDGE, DIM_TEXT = "#f7f7f7", "#c8c8c8", "#a0a0a0"

W, H, H_NORM = 3.0, 0.62, 0.42  # box width, height, Add & Norm's height (data units)
ENC, DEC = 2.6, 8.2  # the two columns' centres
XMIN, XSPAN, YMIN, YSPAN = -0.9, 12.3, -0.35, 13.75  # the drawing's extent

# Each part: (kind, label, x, y, chapters that build it, chapters also about it), bottom to top.
PARTS = [
    ("embedding", "Input\nEmbedding", ENC, 1.3, (5,), (11,)),
    ("embedding", "Output\nEmbedding", DEC, 1.3, (5,), (11,)),
    ("attention", "Multi-Head\nAttention", ENC, 4.1, (1, 2), (10,)),
    ("norm", "Add & Norm", ENC, 5.0, (4,), ()),
    ("ffn", "Feed\nForward", ENC, 6.25, (4,), ()),
    ("norm", "Add & Norm", ENC, 7.15, (4,), ()),
    ("attention", "Masked\nMulti-Head\nAttention", DEC, 4.1, (2, 6), (10, 12)),
    ("norm", "Add & Norm", DEC, 5.0, (4,), (12,)),
    ("attention", "Multi-Head\nAttention", DEC, 6.5, (2, 6), (10,)),
    ("norm", "Add & Norm", DEC, 7.4, (4,), ()),
    ("ffn", "Feed\nForward", DEC, 8.65, (4,), (12,)),
    ("norm", "Add & Norm", DEC, 9.55, (4,), (12,)),
    ("linear", "Linear", DEC, 11.0, (6,), ()),
    ("softmax", "Softmax", DEC, 11.9, (6,), (7,)),
]
FRAMES = [  # (label, x, bottom, top, chapters, also, the side of its "N×")
    ("Encoder", ENC, 3.3, 7.75, (5,), (9,), -1),
    ("Decoder", DEC, 3.3, 10.15, (6,), (9, 12, 13), 1),
]
TEXTS = [  # (label, x, y, chapters, also)
    ("Inputs", ENC, 0.25, (), (11,)),
    ("Outputs\n(shifted right)", DEC, 0.2, (7,), (8, 11, 13)),
    ("Output\nProbabilities", DEC, 12.85, (8,), (7, 11, 13)),
]


def draw_transformer(chapter=None, *, ax=None, width=7.0, title=None):
    """Figure 1 of the paper, each part with a badge naming the chapter(s) that build it.
    chapter: None, or 1-13: that chapter's parts outlined in red, the others greyed out.
    Returns the Axes (of a new figure `width` inches wide when ax is None)."""
    if chapter is not None and chapter not in CHAPTERS:
        raise ValueError(f"chapter must be None or one of {sorted(CHAPTERS)}, got {chapter!r}")
    own = ax is None
    if own:
        _, ax = plt.subplots(figsize=(width, width * 1.1))
    # Fonts and lines follow the drawing's size: 1 for the figure 1 of a 7-inch figure.
    box = ax.get_window_extent().transformed(ax.figure.dpi_scale_trans.inverted())
    pen = _Pen(ax, min(box.width, box.height * XSPAN / YSPAN) / 5.4,
               "0.25" if chapter is None else "0.6")
    s = pen.s

    def style(chapters):
        """(lit: drawn in colour, on: highlighted) for a part about `chapters`."""
        return chapter is None or chapter in chapters, chapter is not None and chapter in chapters

    for label, x, bottom, top, built, also, side in FRAMES:
        lit, on = style(built + also)
        ax.add_patch(FancyBboxPatch(
            (x - W / 2 - 0.55, bottom), W + 1.1, top - bottom, boxstyle="round,pad=0,rounding_size=0.25",
            fc=COLORS["frame"] if lit else DIM_FACE, ec=HIGHLIGHT if on else "0.45" if lit else DIM_EDGE,
            lw=(2.2 if on else 1.0) * s, zorder=0, gid=f"frame {label}"))
        ax.text(x + side * (W / 2 + 0.75), (bottom + top) / 2, "N×", fontsize=11 * s, va="center",
                ha="left" if side > 0 else "right", color="0.2" if lit else DIM_TEXT)
        pen.badge(x - side * (W / 2 + 0.55), top, built, lit, label)

    for kind, label, x, y, built, also in PARTS:
        lit, on = style(built + also)
        h = H_NORM if kind == "norm" else H * (1.35 if label.count("\n") == 2 else 1)
        ax.add_patch(FancyBboxPatch(
            (x - W / 2, y - h / 2), W, h, boxstyle="round,pad=0,rounding_size=0.12",
            fc=COLORS[kind] if lit else DIM_FACE, ec=HIGHLIGHT if on else "0.3" if lit else DIM_EDGE,
            lw=(2.2 if on else 0.9) * s, zorder=2, gid=f"box {label.replace(chr(10), ' ')}"))
        ax.text(x, y, label, ha="center", va="center", linespacing=1.0, zorder=3,
                fontsize=(8.5 if kind == "norm" else 9.5) * s, color="black" if lit else DIM_TEXT)
        pen.badge(x + W / 2, y + h / 2, built, lit, label)

    for label, x, y, built, also in TEXTS:
        lit, on = style(built + also)
        ax.text(x, y, label, ha="center", va="center", fontsize=9.5 * s, linespacing=1.0,
                color=HIGHLIGHT if on else "black" if lit else DIM_TEXT,
                fontweight="bold" if on else "normal")
        pen.badge(x + 1.0, y + 0.3, built, lit, label)

    _wires(pen, style((3, 12)), style((3,)))  # 12: rotary positions replace the decoder's
    ax.set_xlim(XMIN, XMIN + XSPAN)
    ax.set_ylim(YMIN, YMIN + YSPAN)
    ax.set_aspect("equal")
    ax.axis("off")
    if title is None:
        title = ("The Transformer (the paper's figure 1); each badge names the chapter that "
                 "builds the part" if chapter is None
                 else f"you are here: {chapter:02d} · {CHAPTERS[chapter]}")
    if title:
        ax.set_title(title, fontsize=10 * max(s, 0.75), pad=2)
    if own:
        ax.figure.tight_layout(pad=0.2)
    return ax


def you_are_here(chapter, *, width=3.6):
    """A small figure 1 with chapter `chapter`'s parts highlighted. Returns the Figure."""
    return draw_transformer(chapter, width=width).figure


class _Pen:
    """Draws on `ax` at scale `s` (lines and fonts follow the figure's size), wires in one colour."""

    def __init__(self, ax, s, wire):
        self.ax, self.s, self.wire = ax, s, wire

    def line(self, points):
        xs, ys = zip(*points)
        self.ax.plot(xs, ys, color=self.wire, lw=1.0 * self.s, zorder=1, solid_capstyle="butt")

    def arrow(self, start, end):
        self.ax.annotate("", xy=end, xytext=start, zorder=1, arrowprops=dict(
            arrowstyle="-|>", color=self.wire, lw=1.0 * self.s, shrinkA=0, shrinkB=0,
            mutation_scale=9 * self.s))

    def badge(self, x, y, chapters, lit, label):
        """A small label naming the chapters that build a part, e.g. "01·02"."""
        if chapters:
            self.ax.text(x, y, "·".join(f"{c:02d}" for c in chapters), ha="center", va="center",
                         fontsize=7 * self.s, color="white", fontweight="bold", zorder=5,
                         bbox=dict(boxstyle="round,pad=0.25", ec="none",
                                   fc="#34495e" if lit else DIM_EDGE),
                         gid=f"badge {label.replace(chr(10), ' ')}")


def _wires(pen, decoder_pe, encoder_pe):
    """Arrows between the boxes, the three inputs (Q, K, V) of each attention, the residual
    connections around each sublayer, and the encoder's output into the cross-attention;
    each positional encoding drawn (lit, on) as its side's pair says."""
    ax, s = pen.ax, pen.s
    for x, side in ((ENC, -1), (DEC, 1)):
        pe_lit, pe_on = encoder_pe if x == ENC else decoder_pe
        pen.arrow((x, 0.55 if x == ENC else 0.6), (x, 1.3 - H / 2))  # tokens -> embedding
        pen.arrow((x, 1.3 + H / 2), (x, 2.25))  # embedding -> (+)
        ax.add_patch(Circle((x, 2.45), 0.2, fc="white", ec=pen.wire, lw=s, zorder=2))
        ax.text(x, 2.45, "+", ha="center", va="center", fontsize=10 * s, zorder=3)
        pe = x + side * 1.25  # the positional encoding, a sine wave, added at (+)
        ax.add_patch(Circle((pe, 2.45), 0.3, fc="white", ec=HIGHLIGHT if pe_on else pen.wire,
                            lw=(2.2 if pe_on else 1.0) * s, zorder=2, gid=f"positional encoding {x}"))
        t = np.linspace(0, 1, 30)
        ax.plot(pe - 0.2 + 0.4 * t, 2.45 + 0.13 * np.sin(2 * np.pi * t), color="0.25", lw=s, zorder=3)
        pen.arrow((pe - side * 0.3, 2.45), (x + side * 0.2, 2.45))
        ax.text(pe + side * 0.42, 2.45, "Positional\nEncoding", ha="left" if side > 0 else "right",
                va="center", fontsize=8.5 * s, linespacing=1.0, fontweight="bold" if pe_on else "normal",
                color=HIGHLIGHT if pe_on else "black" if pe_lit else DIM_TEXT)
        pen.badge(pe, 2.95, (3,), pe_lit, f"Positional Encoding {x}")

    def edges(y, kind="box"):
        h = {"norm": H_NORM, "box": H, "tall": H * 1.35}[kind]
        return y - h / 2, y + h / 2

    def sublayer(x, start, box, norm, inputs):
        """The stream from y=start up to a box's bottom (an arrow per input, at these x
        offsets), and the residual connection from the branch point around the box into the
        Add & Norm at y=norm."""
        branch = box - 0.32
        pen.line([(x, start), (x, branch)])
        pen.line([(x + min(0, *inputs), branch), (x + max(0, *inputs), branch)])
        for dx in inputs:
            pen.arrow((x + dx, branch), (x + dx, box))
        side = x - W / 2 - 0.3
        pen.line([(x, branch), (side, branch), (side, norm)])
        pen.arrow((side, norm), (x - W / 2, norm))

    qkv, one = (-0.8, 0.0, 0.8), (0.0,)
    # the encoder layer: self-attention and feed-forward, each followed by Add & Norm
    sublayer(ENC, 2.65, edges(4.1)[0], 5.0, qkv)
    pen.arrow((ENC, edges(4.1)[1]), (ENC, edges(5.0, "norm")[0]))
    sublayer(ENC, edges(5.0, "norm")[1], edges(6.25)[0], 7.15, one)
    pen.arrow((ENC, edges(6.25)[1]), (ENC, edges(7.15, "norm")[0]))
    # the decoder layer: masked self-attention, cross-attention (the query from the decoder,
    # on the right; keys and values from the encoder, on the left), feed-forward
    sublayer(DEC, 2.65, edges(4.1, "tall")[0], 5.0, qkv)
    pen.arrow((DEC, edges(4.1, "tall")[1]), (DEC, edges(5.0, "norm")[0]))
    sublayer(DEC, edges(5.0, "norm")[1], edges(6.5)[0], 7.4, (0.8,))
    pen.arrow((DEC, edges(6.5)[1]), (DEC, edges(7.4, "norm")[0]))
    sublayer(DEC, edges(7.4, "norm")[1], edges(8.65)[0], 9.55, one)
    pen.arrow((DEC, edges(8.65)[1]), (DEC, edges(9.55, "norm")[0]))
    # the encoder's output (the memory) goes into the decoder's cross-attention
    enc_top, cross = edges(7.15, "norm")[1], edges(6.5)[0]
    entry, between = cross - 0.14, (ENC + DEC) / 2 + 0.3
    pen.line([(ENC, enc_top), (ENC, 8.2), (between, 8.2), (between, entry), (DEC - 0.15, entry)])
    for dx in (-0.8, -0.15):
        pen.arrow((DEC + dx, entry), (DEC + dx, cross))
    # the decoder's output -> Linear -> Softmax -> probabilities
    pen.arrow((DEC, edges(9.55, "norm")[1]), (DEC, 11.0 - H / 2))
    pen.arrow((DEC, 11.0 + H / 2), (DEC, 11.9 - H / 2))
    pen.arrow((DEC, 11.9 + H / 2), (DEC, 12.55))
