"""Chapter 09's models read a text you type: the attention links of each layer and head, and
what the model makes of the text, as a bar chart beside them:

- the classifier (EncoderClassifier): each class's probability, and "not sure" when the
  most probable one is under inference.NOT_SURE["classifier"], as `tfcourse classify` says;
- the language model (DecoderLM): the probabilities of the next character after the text;
- the masked language model (an EncoderClassifier with mlm=True): each character typed as
  `_` becomes [MASK], and the model's 3 best guesses for it.

ReadingExplorer is AttentionExplorer with that chart: the same controls (example, typed
text, layer, head, token), the same static figure in a saved notebook.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import matplotlib.pyplot as plt
import torch
from torch import nn

from tfcourse.batches import encode_texts
from tfcourse.inference import NOT_SURE
from tfcourse.viz.common import as_array, head_colors, show_token
from tfcourse.viz.explorer import AttentionExplorer, AttentionMap, layer_label
from tfcourse.viz.links import LONG, draw_links, link_key, links_figsize
from tfcourse.viz.record import record
from tfcourse.vocab import MASK, Vocab

BLANK = "_"  # a character typed as this is masked for the masked language model


@dataclass
class Reading:
    """What a model makes of a text: bars (label, probability), best first, a chart title,
    and the short form the figure's title shows (e.g. "Dutch 62%, not sure")."""

    title: str
    bars: list[tuple[str, float]]
    summary: str

    def __str__(self) -> str:
        return self.summary


def _maps(rec, labels: list[str]) -> list[AttentionMap]:
    """Each recorded self-attention call of a one-text batch as an AttentionMap."""
    return [AttentionMap(layer_label(c.name, c.kind), c.kind, c.weights[0].cpu(), labels, labels,
                         None if c.mask is None else c.mask[0, 0].cpu())
            for c in rec.attention]


def _labels(vocab: Vocab, text: str, blank: str | None = None) -> list[str]:
    """The text's characters as the model reads them: "?" for one it does not know,
    "[MASK]" for a blank (ids are not used: [MASK]'s id is another vocabulary's space)."""
    return ["[MASK]" if c == blank else c if c in vocab.stoi else "?" for c in text]


@torch.no_grad()
def classifier_reading(model: nn.Module, vocab: Vocab, classes: Sequence[str], text: str
                       ) -> tuple[Reading, list[AttentionMap]]:
    """A classifier reads `text`: each class's probability, and its attention maps."""
    if not text:
        raise ValueError("text is empty: type something for the model to read")
    tokens, mask = encode_texts([text], vocab)
    with record(model) as rec:
        p = model(tokens, mask)[0].float().softmax(-1)  # (classes,)
    order = p.argsort(descending=True).tolist()
    best, sure = classes[order[0]], p[order[0]].item()
    summary = f"{best} {sure:.0%}" + (", not sure" if sure < NOT_SURE["classifier"] else "")
    return (Reading(f"the classes (not sure under {NOT_SURE['classifier']:.0%})",
                    [(classes[k], p[k].item()) for k in order], summary),
            _maps(rec, ["[CLS]", *_labels(vocab, text)]))


@torch.no_grad()
def lm_reading(model: nn.Module, vocab: Vocab, text: str, k: int = 10
               ) -> tuple[Reading, list[AttentionMap]]:
    """A language model reads `text`: its `k` most probable next characters, and its
    attention maps (causal: the masked pairs are the future)."""
    if not text:
        raise ValueError("text is empty: the model predicts the character after a text")
    ids = torch.tensor([vocab.encode(text)])
    with record(model) as rec:
        p = model(ids)[0, -1].float().softmax(-1)  # (vocab,): after the last character
    top = p.topk(k)
    bars = [(repr(vocab.itos[i])[1:-1] if vocab.itos[i] != " " else "␣", q)
            for i, q in zip(top.indices.tolist(), top.values.tolist())]
    return (Reading(f"the next character (top {k})", bars, f"next: '{bars[0][0]}' {bars[0][1]:.0%}"),
            _maps(rec, _labels(vocab, text)))


@torch.no_grad()
def mlm_reading(model: nn.Module, vocab: Vocab, text: str, top: int = 3
                ) -> tuple[Reading, list[AttentionMap]]:
    """A masked language model reads `text` with each `_` as [MASK]: its `top` guesses at
    each blank, and its attention maps."""
    blanks = [i for i, c in enumerate(text) if c == BLANK]
    if not blanks:
        raise ValueError(f"text has no {BLANK!r}: type {BLANK} where the model should fill in "
                         "a character, e.g. 'Sommer_eit'")
    tokens, mask = encode_texts([text], vocab)
    tokens[0, [i + 1 for i in blanks]] = MASK  # + 1: [CLS] is position 0
    with record(model) as rec:
        p = model(tokens, mask, mlm=True)[0].float().softmax(-1)  # (seq, vocab)
    bars, filled = [], list(text)
    for i in blanks:
        best = p[i + 1].topk(top)
        for rank, (k, q) in enumerate(zip(best.indices.tolist(), best.values.tolist())):
            bars.append((f"blank {i}: '{show_token(vocab.itos[k])}'", q))
            if rank == 0:
                filled[i] = vocab.itos[k]
    return (Reading(f"each blank's {top} best guesses", bars, f"filled in: '{''.join(filled)}'"),
            _maps(rec, ["[CLS]", *_labels(vocab, text, BLANK)]))


def reading_figsize(amap: AttentionMap, per_head: bool) -> tuple[float, float]:
    """The size (inches) draw_reading gives one attention map's figure."""
    heads, q_len, k_len = amap.weights.shape
    width, height = links_figsize(q_len, k_len, False)
    return width * (heads if per_head else 1) + 4.2, max(height, 3.4) + 1.0


def draw_reading(amap: AttentionMap, reading: Reading, head: int | None = None,
                 token: int | None = None, *, title: str | None = None, canvas=None):
    """One attention map's links (head `head`; None: every head, overlaid for a short text,
    one panel per head from LONG tokens on) and the model's reading as bars. canvas: a
    figure size at least reading_figsize. Returns the Figure."""
    w = as_array(amap.weights, "weights")
    heads, q_len, _ = w.shape
    if head is not None and not 0 <= head < heads:
        raise ValueError(f"head must be None (all) or in [0, {heads}), got {head}")
    per_head = head is None and q_len >= LONG
    panels = heads if per_head else 1
    size = reading_figsize(amap, per_head)
    fig = plt.figure(figsize=canvas or size)
    links_w = size[0] - 4.2
    grid = fig.add_gridspec(1, panels + 1, width_ratios=[links_w / panels] * panels + [4.2])
    colors = head_colors(heads)
    for p in range(panels):
        ax = fig.add_subplot(grid[0, p])
        h = p if per_head else head
        draw_links(w if h is None else w[h], amap.queries, amap.keys, ax=ax, token=token,
                   mask=amap.mask, colors=colors if h is None else [colors[h]], key=False,
                   title="all heads" if h is None else f"head {h}")
        if h is not None:
            ax.title.set_color(colors[h])
    masked = amap.mask is not None and not bool(amap.mask.all())
    handles = (link_key(colors, masked=masked) if head is None
               else link_key(masked=masked, color=colors[head]))
    fig.legend(handles=handles, loc="lower left", bbox_to_anchor=(0.0, 0.0), ncol=4,
               fontsize=7, frameon=False, handlelength=2.2)

    ax = fig.add_subplot(grid[0, panels])
    labels, probs = zip(*reading.bars)
    bars = ax.barh(range(len(probs)), probs, color="#4c72b0")
    ax.set_yticks(range(len(probs)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.bar_label(bars, [f"{q:.0%}" for q in probs], fontsize=7, padding=2)
    ax.set_xlim(0, 1.15)
    ax.set_xlabel("probability", fontsize=8)
    ax.set_title(reading.title, fontsize=9)
    ax.spines[["top", "right"]].set_visible(False)
    fig.suptitle(title or amap.label, fontsize=10)
    fig.tight_layout(rect=(0, 0.09, 1, 1))
    return fig


class ReadingExplorer(AttentionExplorer):
    """A chapter 09 model reads an example or a text you type: its attention per layer and
    head, and what it makes of the text (ReadingExplorer.classifier / .lm / .mlm)."""

    def __init__(self, attend, examples, *, max_chars: int, **choices):
        self.MAX_CHARS = max_chars
        super().__init__(attend, examples, **choices)

    @classmethod
    def classifier(cls, model, vocab, classes, examples, **choices):
        """Explore a classifier (EncoderClassifier) and its classes' probabilities."""
        return cls(lambda text: classifier_reading(model, vocab, classes, text), examples,
                   unknown=_unknown(vocab), max_chars=min(cls.MAX_CHARS, _positions(model) - 1),
                   **choices)

    @classmethod
    def lm(cls, model, vocab, examples, k: int = 10, **choices):
        """Explore a language model (DecoderLM) and its next character's probabilities."""
        return cls(lambda text: lm_reading(model, vocab, text, k), examples,
                   unknown=_unknown(vocab), max_chars=min(cls.MAX_CHARS, _positions(model)),
                   **choices)

    @classmethod
    def mlm(cls, model, vocab, examples, **choices):
        """Explore a masked language model: type `_` where it should fill in."""
        return cls(lambda text: mlm_reading(model, vocab, text), examples,
                   unknown=_unknown(vocab, BLANK),
                   max_chars=min(cls.MAX_CHARS, _positions(model) - 1), **choices)

    def figure(self):
        amap = self.maps[self.layer]
        title = f"{self.example!r} → {self.output}:  {amap.label}"
        return draw_reading(amap, self.output, self.head, self.token, canvas=self._canvas,
                            title=f"{title}\n({self.notice})" if self.notice else title)

    def _read(self, example):
        super()._read(example)
        sizes = [reading_figsize(m, m.weights.size(1) >= LONG) for m in self.maps]
        self._canvas = (max(w for w, _ in sizes), max(h for _, h in sizes))


def _positions(model) -> int:
    """How many positions the model has (its longest input)."""
    return model.config.max_len


def _unknown(vocab: Vocab, allowed: str = ""):
    return lambda text: [c for c in dict.fromkeys(text) if c not in vocab.stoi and c not in allowed]
