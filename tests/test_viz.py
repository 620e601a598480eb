"""The visual layer: what it records equals what the model computes (for the reference classes
and for a learner's exercise solutions), and the figures show it: line widths follow the
weights, no line reaches a masked position, the FFN heatmap holds the model's activations.
Figures are inspected as objects (artists, arrays), not as pixels."""

import importlib.util
import json
import math
import sys
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.collections import LineCollection, QuadMesh
from matplotlib.colors import to_rgba
from matplotlib.patches import Circle, FancyBboxPatch
from matplotlib.text import Annotation
from torch.nn import functional as F

import tfcourse
from tfcourse.checkpoint import load_checkpoint
from tfcourse.decoding import greedy_decode
from tfcourse.encoder import Encoder, EncoderLayer
from tfcourse.inference import NOT_SURE, classify, output_confidence
from tfcourse.masks import causal_mask, padding_mask, target_mask
from tfcourse.model import Transformer, TransformerConfig
from tfcourse.viz.embeddings import (
    draw_embedding_space,
    draw_groups,
    draw_positions_added,
    neighbour_agreement,
    pca,
)
from tfcourse.viz.explorer import AttentionExplorer, draw_attention, layer_label, seq2seq_attention
from tfcourse.viz.ffn import draw_ffn, draw_ffn_weights, draw_units, selective_units, unit_means
from tfcourse.viz.ffn_explorer import FFNExplorer
from tfcourse.viz.figure1 import CHAPTERS, HIGHLIGHT, draw_transformer, you_are_here
from tfcourse.viz.heatmaps import draw_heatmaps
from tfcourse.viz.journey import draw_journey, follow
from tfcourse.viz.links import GREY, LANE, MAX_WIDTH, MIN_ALPHA, MIN_WIDTH, draw_heads, draw_links
from tfcourse.viz.reading import ReadingExplorer, classifier_reading, lm_reading, mlm_reading
from tfcourse.viz.record import record
from tfcourse.vocab import BOS, EOS

matplotlib.use("Agg")
ROOT = Path(__file__).parents[1]


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def dates():
    model, vocab, _ = load_checkpoint(Path(tfcourse.__file__).parent / "checkpoints" / "dates.pt")
    return model, vocab


def exercise(name):
    """An exercise file as a module (as a learner's file is imported by the checks)."""
    spec = importlib.util.spec_from_file_location(f"_viz_test_{name}", ROOT / "exercises" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def learner_classes():
    """Correct solutions of exercises 02 and 04, written as a learner would, into the
    exercises' own classes (the attribute names are the exercises')."""
    ex02, ex04 = exercise("ex02_multi_head_attention"), exercise("ex04_feed_forward_and_norm")

    class MultiHeadAttention(ex02.MultiHeadAttention):
        def forward(self, query, key, value, mask=None, need_weights=False):
            b = query.size(0)

            def split(x):
                return x.view(b, -1, self.n_heads, self.d_head).transpose(1, 2)

            q, k, v = split(self.w_q(query)), split(self.w_k(key)), split(self.w_v(value))
            scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
            if mask is not None:
                scores = scores.masked_fill(~mask, float("-inf"))
            weights = scores.softmax(dim=-1)
            out = (weights @ v).transpose(1, 2).reshape(b, -1, self.n_heads * self.d_head)
            return self.w_o(out), weights if need_weights else None

    class PositionWiseFeedForward(ex04.PositionWiseFeedForward):
        def forward(self, x):
            return self.linear2(self.dropout(self.activation(self.linear1(x))))

    return MultiHeadAttention, PositionWiseFeedForward


def learner_layer(norm_first, activation="relu"):
    """The reference EncoderLayer with its attention and FFN replaced by the learner's classes
    holding the same weights; and the reference layer."""
    torch.manual_seed(0)
    reference = EncoderLayer(16, 4, 32, dropout=0.0, norm_first=norm_first, activation=activation)
    mha, ffn = learner_classes()
    layer = EncoderLayer(16, 4, 32, dropout=0.0, norm_first=norm_first, activation=activation)
    layer.load_state_dict(reference.state_dict())
    layer.self_attn = mha(16, 4)
    layer.self_attn.load_state_dict(reference.self_attn.state_dict())
    layer.feed_forward = ffn(16, 32, activation=activation)
    layer.feed_forward.load_state_dict(reference.feed_forward.state_dict())
    return layer, reference


# ----------------------------------------------------------------------------- recording


def test_record_gives_every_attention_call_with_its_kind_and_the_models_weights():
    torch.manual_seed(0)
    model = Transformer(TransformerConfig.tiny(12, n_layers=2)).eval()
    src = torch.tensor([[5, 6, 7, 8, 0], [4, 5, 6, 7, 8]])
    tgt = torch.tensor([[1, 9, 10, 0], [1, 4, 4, 4]])
    src_mask, tgt_mask = padding_mask(src, 0), target_mask(tgt, 0)
    with record(model) as rec:
        logits = model(src, tgt, src_mask, tgt_mask)
    assert [(c.name, c.kind) for c in rec.attention] == [
        ("encoder.layers.0.self_attn", "self"), ("encoder.layers.1.self_attn", "self"),
        ("decoder.layers.0.self_attn", "masked self"), ("decoder.layers.0.cross_attn", "cross"),
        ("decoder.layers.1.self_attn", "masked self"), ("decoder.layers.1.cross_attn", "cross"),
    ]
    # the weights are the ones the layer computes (asked for directly)
    x = model.positional(model.src_embed(src))
    _, direct = model.encoder.layers[0].self_attn(x, x, x, src_mask, need_weights=True)
    torch.testing.assert_close(rec.attention[0].weights, direct)
    assert rec.attention[0].mask.shape == (2, 4, 5, 5)
    assert not rec.attention[3].mask[0, :, :, 4].any()  # padded source position
    for call in rec.attention:  # each row a distribution, nothing on padding or the future
        torch.testing.assert_close(call.weights.sum(-1), torch.ones(call.weights.shape[:-1]))
        assert (call.weights[~call.mask] == 0).all()
    assert (rec.attention[3].weights[0, :, :, 4] == 0).all()
    assert (rec.attention[2].weights.triu(1) == 0).all()
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())  # hooks gone
    torch.testing.assert_close(logits, model(src, tgt, src_mask, tgt_mask))  # output unchanged


def test_record_leaves_the_model_as_it_was():
    model = Transformer(TransformerConfig.tiny(12, n_layers=1, dropout=0.3))
    model.train()
    model.decoder.eval()
    src, tgt = torch.tensor([[4, 5, 6]]), torch.tensor([[1, 4]])
    with record(model) as rec:
        assert not any(m.training for m in model.modules())  # no dropout while recording
        model(src, tgt, None, causal_mask(2))
    assert model.training and model.encoder.training and not model.decoder.training
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
    weights = rec.attention[0].weights
    torch.testing.assert_close(weights.sum(-1), torch.ones_like(weights.sum(-1)))
    # a caller that did not ask for the weights still gets None
    attn = model.encoder.layers[0].self_attn
    with record(attn):
        x = torch.randn(1, 3, 64)
        assert attn(x, x, x)[1] is None


def test_record_works_on_a_learners_modules_and_names_what_it_cannot_use():
    layer, reference = learner_layer(norm_first=False)
    x, mask = torch.randn(2, 6, 16), padding_mask(torch.tensor([[1] * 6, [1] * 4 + [0] * 2]), 0)
    with record(layer) as mine, record(reference) as theirs:
        layer(x, mask), reference(x, mask)
    torch.testing.assert_close(mine.attention[0].weights, theirs.attention[0].weights)
    torch.testing.assert_close(mine.ffn[0].hidden, theirs.ffn[0].hidden)

    class NoWeights(torch.nn.Module):
        def forward(self, query, key, value, mask=None, need_weights=False):
            return query, None

    NoWeights.__name__ = "MultiHeadAttention"
    module = NoWeights()
    with pytest.raises(TypeError, match="returned weights = None with need_weights=True"):
        with record(module):
            module(x, x, x)
    with pytest.raises(ValueError, match="nothing to record"):
        with record(torch.nn.Linear(2, 2)):
            pass


def learner_encoder_layer(norm_first, activation):
    """A correct solution of exercise 05's EncoderLayer, its residuals written out by hand
    from the parts of its sublayers (norm, dropout), not by calling them."""
    ex05 = exercise("ex05_encoder")

    class EncoderLayer(ex05.EncoderLayer):
        def forward(self, x, mask=None):
            (s1, s2), attend = self.sublayers, lambda h: self.self_attn(h, h, h, mask)[0]
            if s1.norm_first:
                x = x + s1.dropout(attend(s1.norm(x)))
                return x + s2.dropout(self.feed_forward(s2.norm(x)))
            x = s1.norm(x + s1.dropout(attend(x)))
            return s2.norm(x + s2.dropout(self.feed_forward(x)))

    torch.manual_seed(0)
    return EncoderLayer(16, 4, 32, dropout=0.0, norm_first=norm_first, activation=activation)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
@pytest.mark.parametrize("who", ["reference", "exercises 02 and 04", "exercise 05"])
def test_ffn_hidden_activations_are_the_models_and_the_residual_is_the_stream(norm_first, who):
    activation = "gelu" if norm_first else "relu"
    layer, reference = learner_layer(norm_first, activation)
    model = {"reference": reference, "exercises 02 and 04": layer,
             "exercise 05": learner_encoder_layer(norm_first, activation)}[who]
    x = torch.randn(2, 5, 16)
    with record(model) as rec:
        out = model(x)
    (call,) = rec.ffn
    ffn = model.feed_forward
    act = F.gelu if norm_first else F.relu
    torch.testing.assert_close(call.hidden, act(ffn.linear1(call.input)))
    torch.testing.assert_close(call.output, ffn(call.input))
    # the update is added to the residual stream: pre-norm, the layer's output is their sum
    if norm_first:
        torch.testing.assert_close(out, call.residual + call.output)
        assert not torch.allclose(call.residual, call.input)
    else:
        assert call.residual is call.input or torch.equal(call.residual, call.input)
    # and the figure shows exactly these activations
    fig = draw_ffn(call, list("abcde"), example=1)
    meshes = [a.collections[0] for a in fig.axes[:3]]
    shown = [np.asarray(m.get_array()).reshape(5, -1) for m in meshes]
    for values, tensor in zip(shown, (call.input, call.hidden, call.output)):
        np.testing.assert_allclose(values, tensor[1].numpy(), rtol=1e-6)
    inactive = [t.get_text() for t in fig.axes[1].texts if t.get_text().endswith("%")]
    assert inactive == [f"{s:.0%}" for s in (call.hidden[1] <= 0).float().mean(-1).tolist()]
    bars = [p.get_width() for p in fig.axes[3].patches]
    np.testing.assert_allclose(bars[:5], call.residual[1].norm(dim=-1).numpy(), rtol=1e-5)
    np.testing.assert_allclose(bars[5:], call.output[1].norm(dim=-1).numpy(), rtol=1e-5)


# ----------------------------------------------------------------------------- links


def links_of(ax):
    """{(query label, key label, collection gid): (width, rgba)} read back from the figure:
    each line's ends are matched with the tokens' annotations (the nearest, within 0.3 of a
    token spacing: overlaid heads each have a lane beside the token)."""
    labels = [a for a in ax.texts if isinstance(a, Annotation) and a.get_gid()]
    xy = np.array([a.xy for a in labels], dtype=float)

    def nearest(p):
        d = np.hypot(*(xy - p).T)
        assert d.min() <= 0.3, f"a line ends at {p}, at no token"
        return labels[d.argmin()].get_gid()

    found = {}
    for c in ax.collections:
        if not isinstance(c, LineCollection) or c.get_gid() == "masked":
            continue
        widths, colors = c.get_linewidths(), c.get_colors()
        for k, seg in enumerate(c.get_segments()):
            ends = tuple(nearest(p) for p in seg)
            found[(*ends, c.get_gid())] = (widths[k % len(widths)], tuple(colors[k % len(colors)]))
    return found


@pytest.mark.parametrize("cross", [False, True], ids=["self", "cross"])
def test_line_width_and_opacity_follow_the_weight(cross):
    w = torch.tensor([[0.6, 0.3, 0.1, 0.0], [0.05, 0.15, 0.3, 0.5], [0.25, 0.25, 0.25, 0.25]])
    ax = draw_links(w, list("abc"), list("wxyz"), cross=cross, threshold=0.02)
    links = links_of(ax)
    assert len(links) == 11  # the one zero weight gets no line
    for (q, k, gid), (width, rgba) in links.items():
        weight = w[int(q.split()[1]), int(k.split()[1])].item()
        assert width == pytest.approx(MIN_WIDTH + (MAX_WIDTH - MIN_WIDTH) * weight)
        assert rgba[3] == pytest.approx(MIN_ALPHA + (1 - MIN_ALPHA) * weight)
        assert gid == "head 0"
    ordered = sorted(links.values())
    assert [a for _, (*_, a) in ordered] == sorted(a for _, (*_, a) in ordered)


def test_no_line_to_a_masked_or_negligible_position():
    w = torch.full((4, 4), 0.25)  # a wrong module could give masked keys weight: still no line
    mask = causal_mask(4)
    links = links_of(draw_links(w, list("abcd"), mask=mask))
    pairs = {(int(q.split()[1]), int(k.split()[1])) for q, k, _ in links}
    assert pairs == {(i, j) for i in range(4) for j in range(i + 1)}
    links = links_of(draw_links(torch.tensor([[0.995, 0.005]]), ["q"], ["a", "b"], threshold=0.01))
    assert [k for _, k, _ in links] == ["key 0"]


def test_a_masked_pair_is_drawn_dotted_unlike_a_small_weight_and_the_key_names_both():
    w = torch.tensor([[1.0, 0.0, 0.0], [0.99, 0.01, 0.0], [0.5, 0.3, 0.2]])
    ax = draw_links(w, list("abc"), mask=causal_mask(3))
    where = {tuple(np.round(a.xy, 6)): a.get_gid() for a in ax.texts if isinstance(a, Annotation)}
    (dotted,) = [c for c in ax.collections if c.get_gid() == "masked"]
    pairs = {tuple(where[tuple(np.round(p, 6))] for p in seg) for seg in dotted.get_segments()}
    assert pairs == {("query 0", "key 1"), ("query 0", "key 2"), ("query 1", "key 2")}
    assert dotted.get_linestyle()[0][1] is not None  # dashes: not a solid weight line
    assert ("query 1", "key 1", "head 0") not in links_of(ax)  # 0.01 < threshold: no line at all
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert {"weight 0.1", "weight 0.5", "weight 1", "masked pair", "no line: < 0.02"} <= set(labels)


def test_heads_overlaid_only_while_the_sequence_is_short_with_one_key_of_head_colours():
    short = draw_heads(torch.softmax(torch.randn(2, 5, 5), -1), list("abcde"))
    assert [a.get_title() for a in short.axes] == ["head 0", "head 1", "all heads"]
    long = draw_heads(torch.softmax(torch.randn(2, 20, 20), -1), list("abcdefghijklmnopqrst"))
    assert [a.get_title() for a in long.axes] == ["head 0", "head 1"]
    (key,) = long.legends
    assert [t.get_text() for t in key.get_texts()][:2] == ["head 0", "head 1"]
    assert "masked pair" not in [t.get_text() for t in key.get_texts()]  # no mask, no dots


def test_overlaid_heads_draw_heavy_lines_on_top_whatever_their_head():
    w = torch.tensor([[[0.9, 0.1]], [[0.2, 0.8]]])  # head 0 heavy on key 0, head 1 on key 1
    ax = draw_links(w, ["q"], ["a", "b"], threshold=0)
    order = sorted((c.get_zorder(), c.get_gid(), len(c.get_segments())) for c in ax.collections
                   if c.get_gid() != "masked" and len(c.get_segments()))
    heavy = [z for z, _, _ in order[-2:]]
    light = [z for z, _, _ in order[:2]]
    assert min(heavy) > max(light)


def test_a_small_weight_draws_a_faint_visible_line_and_a_zero_or_masked_one_none():
    # notebook 01's example: key 2 gets 0.015; with threshold=0 every nonzero weight is drawn
    w = torch.tensor([[0.806, 0.179, 0.015, 0.0]])
    links = links_of(draw_links(w, ["q"], list("abcd"), threshold=0))
    assert sorted(k for _, k, _ in links) == ["key 0", "key 1", "key 2"]  # not the 0
    width, rgba = links[("query 0", "key 2", "head 0")]
    assert width >= 0.5 and rgba[3] >= 0.2  # thin and faint, but on the page
    assert width < links[("query 0", "key 1", "head 0")][0] < links[("query 0", "key 0", "head 0")][0]
    # a masked key gets no line even when a wrong module gives it weight, and even at
    # threshold 0; nor does a key whose weight is exactly 0 (what a correct module gives it)
    masked = torch.tensor([True, True, False, False])
    links = links_of(draw_links(torch.tensor([[0.5, 0.2, 0.3, 0.0]]), ["q"], list("abcd"),
                                mask=masked, threshold=0))
    assert sorted(k for _, k, _ in links) == ["key 0", "key 1"]


def test_masked_self_attention_of_a_real_model_never_links_the_future_or_padding(dates):
    model, vocab = dates
    _, maps = seq2seq_attention(model, vocab, "Sunday, March 2, 1958")
    masked = [m for m in maps if m.kind == "masked self"]
    assert len(masked) == len(model.decoder.layers)
    for m in masked:
        fig = draw_heads(m.weights, m.queries, m.keys, mask=m.mask)
        for ax in fig.axes:
            for q, k, _ in links_of(ax):
                assert int(k.split()[1]) <= int(q.split()[1]), f"{m.label}: {q} -> {k}"
    # padding: a batch of two lengths, the shorter one's padded keys get no line
    src = torch.tensor([vocab.encode("3 mai 2027") + [0] * 6, vocab.encode("March 3, 2027 ab")])
    with record(model.encoder) as rec:
        model.encoder(model.positional(model.src_embed(src)), padding_mask(src, 0))
    call = rec.attention[0]
    ax = draw_links(call.weights[0], list(range(16)), mask=call.mask[0, 0])
    keys = {int(k.split()[1]) for _, k, _ in links_of(ax)}
    assert max(keys) == 9 and len(keys) > 5


def test_a_chosen_token_keeps_its_colour_and_the_others_turn_grey():
    w = torch.softmax(torch.randn(2, 5, 5, generator=torch.Generator().manual_seed(0)), -1)
    ax = draw_links(w, list("abcde"), token=2, threshold=0.0)
    links = links_of(ax)
    white = np.ones(3)
    for (q, _, gid), (_, rgba) in links.items():
        # two heads overlaid: opaque, grey mixed with white in proportion to the weight
        share = (white - rgba[:3]) / (white - GREY)
        assert rgba[3] == 1.0
        if q == "query 2":
            assert gid.endswith("highlighted") and not np.allclose(share, share[0])
        else:
            assert not gid.endswith("highlighted") and share == pytest.approx([share[0]] * 3)
    assert len(links) == 2 * 25  # both heads, every pair
    label = next(a for a in ax.texts if a.get_gid() == "query 2")
    assert label.get_fontweight() == "bold"


def test_heads_side_by_side_one_colour_each_and_all_heads_overlaid():
    w = torch.softmax(torch.randn(3, 4, 6), -1)
    fig = draw_heads(w, list("abcd"), list("uvwxyz"), cross=True)
    assert [a.get_title() for a in fig.axes] == ["head 0", "head 1", "head 2", "all heads"]
    colors = [tuple(a.collections[0].get_colors()[0][:3]) for a in fig.axes[:3]]
    assert len(set(colors)) == 3
    overlay = {c.get_gid(): c.get_colors()[0] for c in fig.axes[3].collections
               if len(c.get_segments())}
    for h in range(3):  # opaque, the head's colour mixed with white: no brown where they cross
        share = (1 - overlay[f"head {h}"][:3]) / (1 - np.array(colors[h]))
        assert overlay[f"head {h}"][3] == 1.0 and share == pytest.approx([share[0]] * 3)
    # side by side: each head's lines in its own lane, shifted from the next head's
    starts = [min(s[0][0] for c in fig.axes[3].collections if c.get_gid() == f"head {h}"
                  for s in c.get_segments()) for h in range(3)]
    assert np.diff(starts) == pytest.approx([LANE, LANE])


def test_drawing_rejects_labels_that_do_not_match_the_weights():
    with pytest.raises(ValueError, match="queries must have 3 labels"):
        draw_links(torch.rand(3, 4), list("ab"), list("wxyz"))
    with pytest.raises(ValueError, match=r"token must be a query position in \[0, 3\)"):
        draw_links(torch.rand(3, 3), list("abc"), token=3)
    with pytest.raises(ValueError, match="weights must have shape"):
        draw_links(torch.rand(2, 2, 3, 3), list("abc"))


# ----------------------------------------------------------------------------- FFN weights, embeddings


def test_ffn_weights_drawn_as_the_model_uses_them_and_off_units_faded():
    g = torch.Generator().manual_seed(0)
    w_1, w_2 = torch.randn(4, 12, generator=g), torch.randn(12, 4, generator=g)
    x = torch.randn(4, generator=g)
    fig = draw_ffn_weights(w_1, w_2, x)
    w1_ax, bars_ax, w2_ax = fig.axes[0], fig.axes[2], fig.axes[4]
    np.testing.assert_allclose(w1_ax.collections[0].get_array().reshape(4, 12), w_1.numpy(), rtol=1e-6)
    np.testing.assert_allclose(w2_ax.collections[0].get_array().reshape(4, 12), w_2.T.numpy(), rtol=1e-6)
    scores, passed = (np.array([p.get_height() for p in bars_ax.patches[k * 12:(k + 1) * 12]])
                      for k in (0, 1))
    np.testing.assert_allclose(scores, (x @ w_1).numpy(), rtol=1e-6)
    np.testing.assert_allclose(passed, torch.relu(x @ w_1).numpy(), rtol=1e-6)
    faded = sorted(int(p.get_x()) for p in w2_ax.patches)
    assert faded == torch.nonzero(x @ w_1 <= 0).flatten().tolist()
    np.testing.assert_allclose(fig.axes[5].collections[0].get_array().ravel(),
                               (torch.relu(x @ w_1) @ w_2).numpy(), rtol=1e-5)
    with pytest.raises(ValueError, match=r"w_2 must be \(d_ff, d_model\) = \(12, 4\)"):
        draw_ffn_weights(w_1, w_2.T, x)


def test_neighbour_agreement_counts_same_group_nearest_neighbours_against_chance():
    # a and b point along x, c along y; d along y too: a's nearest is b, b's a, c's d, d's c
    vectors = torch.tensor([[1.0, 0.1], [1.0, -0.1], [0.1, 1.0], [-0.1, 1.0]])
    assert neighbour_agreement(vectors, ["x", "x", "y", "y"]) == (1.0, 0.5)
    assert neighbour_agreement(vectors, ["x", "y", "x", "y"]) == (0.0, 0.5)
    agreement, chance = neighbour_agreement(vectors, ["x", "x", "x", "y"])
    assert (agreement, chance) == (0.5, 0.75 ** 2 + 0.25 ** 2)  # d's nearest is c: "x"
    with pytest.raises(ValueError, match="vectors must be"):
        neighbour_agreement(vectors, ["x"])


def test_draw_groups_puts_each_group_in_its_colour_at_its_principal_coordinates():
    gen = torch.Generator().manual_seed(0)
    vectors = torch.cat([torch.randn(20, 5, generator=gen) + 4, torch.randn(30, 5, generator=gen) - 4])
    groups = ["a"] * 20 + ["b"] * 30
    ax = draw_groups(vectors, groups)
    coords, _, _ = pca(vectors)
    a, b = ax.collections
    assert a.get_label() == "a" and b.get_label() == "b"
    assert np.allclose(a.get_offsets(), coords[:20]) and np.allclose(b.get_offsets(), coords[20:])
    assert (a.get_offsets()[:, 0] * b.get_offsets()[:, 0].mean() < 0).all()  # apart along PC 1


def test_pca_finds_the_spread_direction_with_a_sign_that_does_not_depend_on_the_machine():
    g = torch.Generator().manual_seed(0)
    direction = torch.tensor([3.0, 4.0, 0.0]) / 5
    x = torch.randn(50, 1, generator=g) * 10 * direction + 0.1 * torch.randn(50, 3, generator=g)
    coords, directions, explained = pca(x)
    assert abs(float(np.dot(directions[0], direction.numpy()))) > 0.999 and explained[0] > 0.99
    again, _, _ = pca(-x)  # the mirrored cloud: same picture up to the sign rule
    assert coords[np.abs(coords[:, 0]).argmax(), 0] > 0 and again[np.abs(again[:, 0]).argmax(), 0] > 0
    np.testing.assert_allclose(np.abs(coords), np.abs(again), atol=1e-9)
    with pytest.raises(ValueError, match="x must be"):
        pca(torch.randn(1, 3))


def test_embedding_space_draws_each_group_at_its_principal_coordinates():
    g = torch.Generator().manual_seed(0)
    vectors = torch.randn(6, 5, generator=g)
    ax = draw_embedding_space(vectors, list("abcdef"), {"first": ["a", "b"], "rest": ["c", "d", "e"]})
    coords, _, _ = pca(vectors)
    np.testing.assert_allclose(ax.collections[0].get_offsets(), coords[[0, 1]], rtol=1e-6)
    np.testing.assert_allclose(ax.collections[1].get_offsets(), coords[[2, 3, 4]], rtol=1e-6)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["first", "rest"]
    # positions added: every token's path is the same shape, shifted (the same PE added)
    ax = draw_positions_added(vectors[:2], torch.randn(7, 5, generator=g), ["a", "b"])
    a, b = (line.get_xydata() for line in ax.lines)
    np.testing.assert_allclose(a - a[0], b - b[0], atol=1e-5)


def test_a_token_journey_is_the_encoder_s_own_computation(dates):
    model, vocab = dates
    text = "Sunday, March 2, 1958"
    x = model.positional(model.src_embed(torch.tensor([vocab.encode(text)])))
    position = text.index("M")
    journey = follow(model.encoder, x, position)
    with torch.no_grad():
        out = model.encoder(x)
    torch.testing.assert_close(journey.streams[-1], out[0, position])
    torch.testing.assert_close(journey.streams[0], x[0, position])
    for k, layer in enumerate(model.encoder.layers):  # post-norm: x <- LayerNorm(x + update)
        for j in range(2):
            step = 2 * k + j
            torch.testing.assert_close(
                layer.sublayers[j].norm(journey.streams[step] + journey.updates[step]),
                journey.streams[step + 1])
    assert journey.reads.shape == (2, 4, len(text))
    torch.testing.assert_close(journey.reads.sum(-1), torch.ones(2, 4))
    assert all(0 < a < journey.d_ff for a in journey.active)
    fig = draw_journey(journey, list(text), position)
    assert fig.axes[0].get_xticklabels()[position].get_text() == "M"
    with pytest.raises(ValueError, match=r"position must be in \[0, 21\)"):
        follow(model.encoder, x, 21)


def test_the_ffn_explorer_draws_the_chosen_token_s_ffn_and_names_a_bad_choice():
    torch.manual_seed(0)
    encoder = Encoder(8, 2, 12, 2, dropout=0.0, norm_first=True)
    model = torch.nn.Sequential(torch.nn.Embedding(10, 8), encoder).eval()
    tokens = torch.randint(10, (2, 5), generator=torch.Generator().manual_seed(0))
    explorer = FFNExplorer(model, tokens, [str(i) for i in range(10)], layer=1)
    explorer.select(example=1, position=4)
    assert (explorer.layer, explorer.example, explorer.position) == (1, 1, 4)
    layer = encoder.layers[1]
    with torch.no_grad():  # layer 1's FFN input, computed by hand: pre-norm, after attention
        h = encoder.layers[0](model[0](tokens))
        h = layer.sublayers[0](h, lambda z: layer.self_attn(z, z, z)[0])
        expected = layer.feed_forward.linear1(layer.sublayers[1].norm(h))[1, 4]
    fig = explorer.figure()
    scores = np.array([p.get_height() for p in fig.axes[2].patches[:12]])
    np.testing.assert_allclose(scores, expected.numpy(), rtol=1e-5, atol=1e-6)
    assert f"token '{tokens[1, 4].item()}' at position 4" in fig.texts[0].get_text()
    with pytest.raises(ValueError, match=r"position must be in \[0, 5\), got 5"):
        explorer.select(position=5)
    assert explorer.position == 4  # a bad choice changes nothing


# ----------------------------------------------------------------------------- heatmaps


def test_compared_heatmaps_share_one_colour_scale_and_one_colour_bar():
    ms = [torch.rand(3, 4) * s for s in (1, 2, 3)]
    fig = draw_heatmaps(ms, list("abc"), list("wxyz"), titles=["x", "y", "z"])
    meshes = [c for a in fig.axes if a.get_label() != "<colorbar>" for c in a.collections
              if isinstance(c, QuadMesh)]
    assert len(meshes) == 3 and len({m.get_clim() for m in meshes}) == 1
    assert meshes[0].get_clim()[1] == pytest.approx(max(m.max().item() for m in ms))
    assert sum(a.get_label() == "<colorbar>" for a in fig.axes) == 1
    for mesh, m in zip(meshes, ms):
        np.testing.assert_allclose(np.asarray(mesh.get_array()).reshape(3, 4), m.numpy(), rtol=1e-6)
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == list("abc")


# ----------------------------------------------------------------------------- FFN units


def test_unit_means_average_each_group_and_selective_units_find_the_specialists():
    hidden = torch.tensor([[1.0, 0.0, 2.0], [3.0, 0.0, 2.0], [0.0, 5.0, 2.0]])
    labels, means = unit_means(hidden, ["digit", "digit", "letter"])
    assert labels == ["digit", "letter"]
    torch.testing.assert_close(means, torch.tensor([[2.0, 0.0, 2.0], [0.0, 5.0, 2.0]]))
    assert selective_units(means, 2).tolist() == [0, 1]  # unit 2 fires for everything
    ax = draw_units(means, labels, n_units=2)
    np.testing.assert_allclose(np.asarray(ax.collections[0].get_array()).reshape(2, 2),
                               [[1.0, 0.0], [0.0, 1.0]])
    assert ax.get_ylabel() == "tokens" and ax.get_xlabel() == "hidden unit"
    assert draw_units(means, labels, n_units=2, ylabel="token to output").get_ylabel() == "token to output"
    with pytest.raises(ValueError, match=r"hidden must have shape \(n_tokens=2, d_ff\)"):
        unit_means(hidden, ["a", "b"])


# ----------------------------------------------------------------------------- figure 1


def test_figure_1_labels_every_part_with_its_chapter_and_highlights_one_chapter():
    ax = draw_transformer()
    badges = [(t.get_gid(), t.get_text()) for t in ax.texts if (t.get_gid() or "").startswith("badge")]
    assert ("badge Masked Multi-Head Attention", "02·06") in badges
    assert ("badge Feed Forward", "04") in badges and ("badge Encoder", "05") in badges
    assert ("badge Multi-Head Attention", "01·02") in badges  # the encoder's
    shown = {int(c) for _, text in badges for c in text.split("·")}
    assert shown == set(range(1, 9))  # every chapter that builds a part of the model
    assert not any(p.get_edgecolor() == to_rgba(HIGHLIGHT) for p in ax.patches)
    for chapter in CHAPTERS:
        ax = draw_transformer(chapter, ax=plt.subplots(figsize=(7, 7.7))[1])
        red = {p.get_gid() for p in ax.patches if p.get_edgecolor() == to_rgba(HIGHLIGHT)}
        red |= {t.get_text() for t in ax.texts if t.get_color() == HIGHLIGHT}
        assert red, f"chapter {chapter} highlights nothing"
        assert chapter != 4 or red == {"box Add & Norm", "box Feed Forward"}
        assert chapter != 3 or {p.get_gid() for p in ax.patches if isinstance(p, Circle)
                                and p.get_edgecolor() == to_rgba(HIGHLIGHT)} == {
            "positional encoding 2.6", "positional encoding 8.2"}
        assert chapter != 9 or red == {"frame Encoder", "frame Decoder"}
        assert chapter != 11 or red == {"box Input Embedding", "box Output Embedding", "Inputs",
                                        "Outputs\n(shifted right)", "Output\nProbabilities"}
        assert chapter != 12 or "frame Encoder" not in red and "positional encoding 2.6" not in red and {
            "frame Decoder", "box Feed Forward", "positional encoding 8.2"} <= red
        assert chapter != 13 or red == {"frame Decoder", "Outputs\n(shifted right)",
                                        "Output\nProbabilities"}
        assert f"you are here: {chapter:02d}" in ax.get_title()
    fig = you_are_here(2)
    assert fig.get_figwidth() < 4 and sum(isinstance(p, FancyBboxPatch) for p in fig.axes[0].patches) > 10
    with pytest.raises(ValueError, match="chapter must be None or one of"):
        draw_transformer(14)


# ----------------------------------------------------------------------------- the explorer


def test_seq2seq_attention_is_what_the_model_does_with_its_own_output(dates):
    model, vocab = dates
    text = "samedi 21 novembre 2026"
    output, maps = seq2seq_attention(model, vocab, text)
    src = torch.tensor([vocab.encode(text)])
    greedy = greedy_decode(model, src, padding_mask(src, 0), 32, BOS, EOS)
    assert output == vocab.decode(greedy[0]) == "2026-11-21"
    labels = [m.label for m in maps]
    assert labels[0] == "encoder layer 0 · self-attention"
    assert labels[-1] == f"decoder layer {len(model.decoder.layers) - 1} · cross-attention"
    cross = maps[-1]
    assert cross.keys == list(text) and cross.queries == [*output, "⏎"]
    assert maps[2].keys == ["BOS", *output] and maps[2].kind == "masked self"
    # the model writes the year while looking at the year: the weight is on "2026"
    year = cross.weights.mean(0)[:4].sum(0)
    assert year[-4:].sum() > 0.5 * year.sum()


def test_explorer_draws_each_choice_and_rejects_impossible_ones(dates):
    model, vocab = dates
    explorer = AttentionExplorer.seq2seq(model, vocab, ["November 21, 2026"], layer=5)
    fig = explorer.figure()
    assert "November 21, 2026" in fig.texts[0].get_text() and "cross-attention" in fig.texts[0].get_text()
    explorer.select(head=2, token=1)
    links = links_of(explorer.figure().axes[0])
    assert {q for q, _, gid in links if gid.endswith("highlighted")} == {"query 1"}
    explorer.select(example="3 mai 2027")  # a new example keeps the layer and head
    assert explorer.examples == ["November 21, 2026", "3 mai 2027"]
    # the output, and its confidence as `tfcourse decode` gives it (the weakest character)
    sure, = output_confidence(model, [("3 mai 2027", "2027-05-03")], vocab)
    assert explorer.output == f"2027-05-03  (weakest character {sure:.0%})" and sure > NOT_SURE["seq2seq"]
    explorer.select(example="qqqq")
    assert explorer.output.endswith(", not sure)")
    explorer.select(example="3 mai 2027")
    assert (explorer.layer, explorer.head, explorer.token) == (5, 2, None)
    with pytest.raises(ValueError, match=r"head must be None \(all heads\) or in \[0, 4\)"):
        explorer.select(head=4)
    with pytest.raises(ValueError, match="text is empty"):
        explorer.select(example="")
    assert explorer.example == "3 mai 2027"
    with pytest.raises(ValueError, match="head must be None"):
        draw_attention(explorer.maps[0], head=9)
    assert layer_label("blocks.3.attn", "masked self") == "blocks layer 3 · masked self-attention"
    assert layer_label("layers.0.attn", "masked self") == "layer 0 · masked self-attention"


def test_explorer_keeps_one_image_size_names_unknown_characters_and_says_its_limit(dates):
    """The page does not jump from layer to layer; "?" is explained; a 200-character input
    is refused with the limit, and the choice stays."""
    import struct

    from tfcourse.viz.explorer import png

    model, vocab = dates
    explorer = AttentionExplorer.seq2seq(model, vocab, ["November 21, 2026"])
    sizes = set()
    for layer in range(len(explorer.maps)):  # self-, masked self- and cross-attention
        explorer.select(layer=layer)
        sizes.add(struct.unpack(">II", png(explorer.figure(), tight=False)[16:24]))  # IHDR
    assert len(sizes) == 1, sizes
    assert explorer.notice == ""
    explorer.select(example="Nov 21, 2026 ★€")
    assert explorer.notice == "'★', '€' are unknown to the model: ?"
    fig = explorer.figure()
    assert "'★', '€' are unknown" in fig._suptitle.get_text()
    plt.close(fig)
    with pytest.raises(ValueError, match="has 200 characters; the explorer draws inputs of up to 40"):
        explorer.select(example="1" * 200)
    assert explorer.example == "Nov 21, 2026 ★€"


def test_explorer_controls_redraw_the_figure_in_place_and_report_bad_input(dates, monkeypatch):
    """The widgets as a kernel runs them: display() gives the controls (with a text for
    notebooks opened without a kernel) and an image with a display id, which each change
    updates."""
    ipywidgets = pytest.importorskip("ipywidgets")
    import IPython.display

    shown, updates = [], []

    class Handle:
        def update(self, obj):
            updates.append(obj)

    def display(obj, raw=False, display_id=None):
        shown.append(obj)
        return Handle() if display_id else None

    monkeypatch.setattr(IPython.display, "display", display)
    model, vocab = dates
    explorer = AttentionExplorer.seq2seq(model, vocab, ["November 21, 2026", "3 mai 2027"])
    explorer._ipython_display_()
    bundle, image = shown
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert bundle["text/plain"].startswith("[Attention explorer: choose")
    assert image.data[:8] == b"\x89PNG\r\n\x1a\n"
    # from here on, an update carries the choice it shows instead of a drawing of it
    monkeypatch.setattr(explorer, "_image", lambda: (explorer.example, explorer.layer,
                                                     explorer.head, explorer.token))
    c = explorer._widgets
    assert c["layer"].options[5] == ("decoder layer 1 · cross-attention", 5)
    assert (c["head"].label, c["token"].label) == ("all", "none")
    c["head"].value = 3
    c["layer"].value = 5
    c["token"].value = 2
    c["example"].value = "3 mai 2027"  # the layer and head stay, the token goes
    c["text"].value = "Jan 3, 1999"
    c["head"].value = -1
    assert updates == [
        ("November 21, 2026", 0, 3, None), ("November 21, 2026", 5, 3, None),
        ("November 21, 2026", 5, 3, 2), ("3 mai 2027", 5, 3, None),
        ("Jan 3, 1999", 5, 3, None), ("Jan 3, 1999", 5, None, None)]
    assert c["example"].options[-1] == c["example"].value == "Jan 3, 1999"
    assert (c["head"].label, c["token"].label) == ("all", "none")
    c["text"].value = ""  # cleared: nothing happens
    assert len(updates) == 6 and c["status"].value == ""
    monkeypatch.setattr(explorer, "attend", lambda text: 1 / 0)
    c["text"].value = "x"
    assert "ZeroDivisionError" in c["status"].value and len(updates) == 6
    assert isinstance(explorer._controls, ipywidgets.VBox)


# ----------------------------------------------------------------------------- stored notebooks


STORED = sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted((ROOT / "tests").glob("**/*.ipynb"))


@pytest.mark.parametrize("path", STORED, ids=lambda p: p.stem)
def test_stored_notebooks_hold_no_widget_a_saved_notebook_cannot_show(path):
    """JupyterLab shows a stored widget as "Error displaying widget: model not found", or (in a
    notebook it does not trust yet) as its first text, "0%| | 0/400": `make notebooks` stores
    what each widget showed last instead."""
    nb = json.loads(path.read_text())
    views = [o for c in nb["cells"] for o in c.get("outputs", [])
             if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert not views, f"re-execute it: make notebooks NB={path.relative_to(ROOT)}"
    assert "widgets" not in nb["metadata"]


def test_explorer_without_ipywidgets_shows_the_figure_and_select_redraws_it(dates, monkeypatch, capsys):
    import IPython.display

    shown = []

    class Handle:
        def update(self, obj):
            shown.append(obj)

    monkeypatch.setattr(IPython.display, "display",
                        lambda obj, raw=False, display_id=None: shown.append(obj) or Handle())
    monkeypatch.setitem(sys.modules, "ipywidgets", None)  # import ipywidgets -> ImportError
    model, vocab = dates
    explorer = AttentionExplorer.seq2seq(model, vocab, ["November 21, 2026"])
    monkeypatch.setattr(explorer, "_image", lambda: (explorer.layer, explorer.head))
    explorer._ipython_display_()
    explorer.select(layer=3, head=1)
    assert shown == [(0, None), (3, 1)]
    assert "pip install ipywidgets" in capsys.readouterr().out


def test_explorer_draws_one_panel_per_head_once_the_input_is_long(dates):
    """All heads of a long input: one panel of links per head, not an overlay; a short one,
    or one head chosen: one panel."""
    model, vocab = dates
    long_text = "Sunday, November 21, 2026"
    explorer = AttentionExplorer.seq2seq(model, vocab, [long_text, "3 mai 2027"], layer=0)
    titles = [ax.get_title() for ax in explorer.figure().axes]
    assert titles[:4] == ["head 0", "head 1", "head 2", "head 3"] and "all heads: links" not in titles
    explorer.select(head=1)
    assert [ax.get_title() for ax in explorer.figure().axes][0] == "head 1: links"
    explorer.select(example="3 mai 2027", head=None)  # 10 characters: overlaid
    assert [ax.get_title() for ax in explorer.figure().axes][0] == "all heads: links"


# ----------------------------------------------------- chapter 09's models read a text


@pytest.fixture(scope="module")
def ch09():
    here = Path(tfcourse.__file__).parent / "checkpoints"
    return {name: load_checkpoint(here / f"{name}.pt") for name in ("classify", "lm", "mlm")}


def test_classifier_reading_is_what_classify_says(ch09):
    model, vocab, state = ch09["classify"]
    for text in ("Mitteleuropäische Sommerzeit", "onsdag"):
        reading, maps = classifier_reading(model, vocab, state["classes"], text)
        (best, p), = classify(model, [text], vocab, state["classes"])
        assert reading.bars[0] == (best, pytest.approx(p)) and len(reading.bars) == len(state["classes"])
        assert sum(q for _, q in reading.bars) == pytest.approx(1.0)
        assert str(reading) == f"{best} {p:.0%}" + (", not sure" if p < NOT_SURE["classifier"] else "")
        assert len(maps) == model.config.n_layers and maps[0].queries == ["[CLS]", *text]


def test_lm_reading_gives_the_next_characters_probabilities(ch09):
    model, vocab, _ = ch09["lm"]
    text = "    def __init__(self"
    reading, maps = lm_reading(model, vocab, text, k=5)
    assert maps[0].queries == list(text)  # its spaces are spaces (another vocabulary's [MASK] id)
    p = model(torch.tensor([vocab.encode(text)]))[0, -1].softmax(-1)
    top = p.topk(5)
    assert [q for _, q in reading.bars] == pytest.approx(top.values.tolist(), abs=1e-6)
    assert reading.bars[0][0] == vocab.itos[top.indices[0].item()]
    assert maps[0].kind == "masked self" and maps[0].label == "layer 0 · masked self-attention"
    n = len(text)
    assert torch.equal(maps[0].mask, torch.ones(n, n, dtype=torch.bool).tril())  # causal


def test_mlm_reading_fills_each_blank(ch09):
    model, vocab, _ = ch09["mlm"]
    reading, maps = mlm_reading(model, vocab, "Sommer_eit Mitteleurop_isch")
    assert [label.split(":")[0] for label, _ in reading.bars] == ["blank 6"] * 3 + ["blank 22"] * 3
    assert maps[0].queries[7] == "[MASK]" and maps[0].queries[23] == "[MASK]"
    filled = str(reading).removeprefix("filled in: '").removesuffix("'")
    assert len(filled) == 27 and "_" not in filled and filled[:6] == "Sommer"
    with pytest.raises(ValueError, match="text has no '_'"):
        mlm_reading(model, vocab, "Sommerzeit")


def test_reading_explorer_draws_each_choice_and_states_its_limit(ch09):
    model, vocab, state = ch09["classify"]
    explorer = ReadingExplorer.classifier(model, vocab, state["classes"], ["onsdag"])
    fig = explorer.figure()
    bars_ax = fig.axes[-1]
    assert [t.get_text() for t in bars_ax.get_yticklabels()] == [c for c, _ in explorer.output.bars]
    assert fig.axes[0].get_title() == "all heads"
    explorer.select(example="heure normale d’Europe centrale")  # long: one panel per head
    assert [ax.get_title() for ax in explorer.figure().axes[:4]] == [f"head {h}" for h in range(4)]
    explorer.select(example="日本 onsdag")
    assert explorer.notice == "'日', '本' are unknown to the model: ?"
    with pytest.raises(ValueError, match="draws inputs of up to 40"):
        explorer.select(example="x" * 41)
    lm, lm_vocab, _ = ch09["lm"]
    assert ReadingExplorer.lm(lm, lm_vocab, ["def"]).MAX_CHARS == min(40, lm.config.max_len)
    mlm, mlm_vocab, _ = ch09["mlm"]
    blanks = ReadingExplorer.mlm(mlm, mlm_vocab, ["Sommer_eit"])
    assert blanks.notice == ""  # "_" is the blank, not an unknown character
