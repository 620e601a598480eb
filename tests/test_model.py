import math

import pytest
import torch
from torch import nn

from tfcourse.masks import causal_mask, padding_mask, target_mask
from tfcourse.model import Transformer, TransformerConfig, count_parameters
from tfcourse.parity import load_torch_weights, run_torch

PAD = 0


def tiny(**overrides):
    torch.manual_seed(0)
    return Transformer(TransformerConfig.tiny(13, **overrides)).eval()


def tokens(batch, seq, lengths):
    t = torch.randint(1, 13, (batch, seq))
    return t.masked_fill(torch.arange(seq) >= torch.tensor(lengths)[:, None], PAD)


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")  # torch's, for pre-norm
@pytest.mark.parametrize(("norm_first", "activation"), [(False, "relu"), (True, "gelu")])
def test_stacks_equal_torch_transformer(norm_first, activation):
    model = tiny(norm_first=norm_first, activation=activation)
    c = model.config
    theirs = nn.Transformer(
        c.d_model, c.n_heads, c.n_layers, c.n_layers, c.d_ff, c.dropout, activation,
        batch_first=True, norm_first=norm_first,
    ).eval()
    if not norm_first:  # nn.Transformer always ends each stack with a LayerNorm; the paper not
        theirs.encoder.norm = theirs.decoder.norm = nn.Identity()
    load_torch_weights(model.encoder, theirs.encoder)
    load_torch_weights(model.decoder, theirs.decoder)
    src, tgt = tokens(3, 7, [7, 5, 2]), tokens(3, 6, [6, 3, 4])
    src_mask, tgt_mask = padding_mask(src, PAD), target_mask(tgt, PAD)
    x, y = model.positional(model.src_embed(src)), model.positional(model.tgt_embed(tgt))
    with torch.no_grad():
        want = run_torch(
            theirs, x, y,
            tgt_mask=~causal_mask(6),
            src_key_padding_mask=src == PAD,
            tgt_key_padding_mask=tgt == PAD,
            memory_key_padding_mask=src == PAD,
        )
        got = model.decoder(y, model.encoder(x, src_mask), src_mask, tgt_mask)
        torch.testing.assert_close(got, want)
        logits = model(src, tgt, src_mask, tgt_mask)
    assert logits.shape == (3, 6, 13)
    torch.testing.assert_close(logits, model.generator(got))


def test_future_target_tokens_do_not_change_earlier_positions():
    model = tiny()
    src, tgt = tokens(2, 5, [5, 5]), tokens(2, 6, [6, 6])
    changed = tgt.clone()
    changed[:, 4:] = (changed[:, 4:] % 12) + 1  # other real tokens from position 4 on
    src_mask = padding_mask(src, PAD)
    out = model(src, tgt, src_mask, target_mask(tgt, PAD))
    out_changed = model(src, changed, src_mask, target_mask(changed, PAD))
    torch.testing.assert_close(out_changed[:, :4], out[:, :4])
    assert not torch.allclose(out_changed[:, 4:], out[:, 4:])


def test_padding_does_not_leak():
    model = tiny()
    src, tgt = tokens(2, 8, [8, 5]), tokens(2, 6, [6, 4])
    logits = model(src, tgt, padding_mask(src, PAD), target_mask(tgt, PAD))
    s, t = src[1:, :5], tgt[1:, :4]  # row 1 without its padding
    alone = model(s, t, padding_mask(s, PAD), target_mask(t, PAD))
    torch.testing.assert_close(logits[1, :4], alone[0])


def test_shared_and_tied_weights():
    model = tiny()
    assert model.src_embed is model.tgt_embed
    assert model.generator.weight is model.tgt_embed.embedding.weight
    model.generator.weight.data.zero_()  # one tensor: the embedding follows
    assert (model.src_embed.embedding.weight == 0).all()

    untied = tiny(share_embeddings=False, tie_output=False)
    assert untied.src_embed is not untied.tgt_embed
    assert untied.generator.weight is not untied.tgt_embed.embedding.weight


@pytest.mark.parametrize("tied", [True, False])
def test_embeddings_start_on_the_scale_of_the_positional_encoding(tied):
    """N(0, 1/d_model) tables: after the x sqrt(d_model) scaling, entries ~N(0, 1) and rows of
    norm ~sqrt(d_model), next to the positional encoding's sqrt(d_model / 2) (notebooks 03, 05).
    The tied output layer is the same table."""
    torch.manual_seed(0)
    d = 256
    model = Transformer(TransformerConfig(100, 100, d_model=d, n_heads=4, d_ff=64, n_layers=1,
                                          share_embeddings=tied, tie_output=tied))
    for embed in (model.src_embed, model.tgt_embed):
        assert embed.embedding.weight.std().item() == pytest.approx(d**-0.5, rel=0.03)
        rows = embed(torch.arange(100)[None])[0].norm(dim=-1)  # (100,)
        assert rows.mean().item() == pytest.approx(d**0.5, rel=0.03)
    pe = model.positional.pe[:100].norm(dim=-1)
    torch.testing.assert_close(pe, torch.full_like(pe, (d / 2) ** 0.5))


def test_xavier_init_with_query_key_value_as_one_stacked_matrix():
    """Every matrix but the embeddings is Xavier-uniform; W^Q, W^K, W^V each as a third of
    [W^Q; W^K; W^V], the 3 d_model x d_model matrix nn.MultiheadAttention initializes (its
    in_proj_weight)."""
    model = tiny(share_embeddings=False, tie_output=False)
    d = model.config.d_model
    for name, p in model.named_parameters():
        if p.dim() < 2 or "_embed." in name:
            continue
        fans = 4 * d if name.endswith(("w_q.weight", "w_k.weight", "w_v.weight")) else sum(p.shape)
        bound = math.sqrt(6 / fans)
        assert 0.9 * bound < p.abs().max() <= bound, name


def test_every_parameter_gets_a_gradient():
    model = tiny(share_embeddings=False).train()
    src, tgt = tokens(2, 5, [5, 3]), tokens(2, 4, [4, 2])
    logits = model(src, tgt, padding_mask(src, PAD), target_mask(tgt, PAD))
    nn.functional.cross_entropy(logits.flatten(0, 1), tgt.flatten()).backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.any()]
    assert not missing


def test_share_embeddings_needs_one_vocabulary():
    with pytest.raises(ValueError, match=r"src_vocab_size=100 and tgt_vocab_size=90"):
        TransformerConfig(100, 90, share_embeddings=True)


@pytest.mark.parametrize(("overrides", "message"), [
    (dict(n_heads=0), "n_heads must be an integer >= 1, got 0"),
    (dict(n_heads=-2), "n_heads must be an integer >= 1, got -2"),
    (dict(n_heads=4.0), "n_heads must be an integer >= 1, got 4.0"),
    (dict(n_heads=3), "divisible by n_heads=3"),
    (dict(d_model=63, n_heads=7), "d_model=63 must be even"),
    (dict(n_layers=-1), "n_layers must be an integer >= 1, got -1"),
    (dict(d_ff=0), "d_ff must be an integer >= 1"),
    (dict(dropout=float("nan")), r"dropout must be a number in \[0, 1\), got nan"),
    (dict(dropout=1.0), r"dropout must be a number in \[0, 1\), got 1.0"),
    (dict(n_layers=0), "n_layers must be an integer >= 1, got 0"),
    (dict(dropout=1.5), "dropout must be a number in"),
    (dict(activation="tanh"), "activation must be one of 'relu', 'gelu', 'silu', got 'tanh'"),
    (dict(pad_id=13), "pad_id=13 is not an id"),
])
def test_config_rejects_bad_values_by_name(overrides, message):
    with pytest.raises(ValueError, match=message):
        TransformerConfig.tiny(13, **overrides)


def test_numpy_integers_are_integers():
    np = pytest.importorskip("numpy")
    config = TransformerConfig.tiny(np.int64(13), n_heads=np.int64(4))
    assert config.n_heads == 4 and type(config.n_heads) is int


def test_presets_follow_table_3():
    base, big = TransformerConfig.base(), TransformerConfig.big()
    assert (base.d_model, base.d_ff, base.n_heads, base.n_layers, base.dropout) == (
        512, 2048, 8, 6, 0.1,
    )
    assert (big.d_model, big.d_ff, big.n_heads, big.n_layers, big.dropout) == (
        1024, 4096, 16, 6, 0.3,
    )
    for c in (base, big):
        assert c.src_vocab_size == c.tgt_vocab_size == 37000
        assert c.share_embeddings and c.tie_output and not c.norm_first
    assert TransformerConfig.tiny(11, dropout=0.0).dropout == 0.0


def test_count_parameters_by_part():
    d, d_ff, n, vocab = 64, 128, 2, 13  # the tiny preset
    attention, ffn, norm = 4 * (d * d + d), 2 * d * d_ff + d_ff + d, 2 * d
    for shared, tied in [(True, True), (False, False), (False, True)]:
        model = tiny(share_embeddings=shared, tie_output=tied)
        counts = count_parameters(model)
        assert counts == {
            "embeddings": (1 if shared else 2) * vocab * d,
            "encoder": n * (attention + ffn + 2 * norm),
            "decoder": n * (2 * attention + ffn + 3 * norm),
            "generator": vocab + (0 if tied else vocab * d),
            "total": counts["total"],
        }
        assert counts["total"] == sum(p.numel() for p in model.parameters())  # each tensor once
        assert counts["total"] == sum(v for k, v in counts.items() if k != "total")


@pytest.mark.parametrize(("preset", "paper"), [("base", 65e6), ("big", 213e6)])
def test_paper_sizes(preset, paper):
    with torch.device("meta"):  # shapes only: no memory, no init cost
        model = Transformer(getattr(TransformerConfig, preset)(vocab_size=37000))
    total = count_parameters(model)["total"]
    print(f"{preset}: {total:,} parameters (paper: {paper / 1e6:.0f}M)")
    assert abs(total - paper) / paper < 0.05
